// Broadcast schedules, in ranks relative to the root (v = (r - root) mod n).
//
// Binomial tree (small messages): v receives from v - 2^k (its highest set bit k), then sends to v + 2^j
// for every j < k... the classic doubling:
//
//   step 0:  0 -> 1            ceil(log2 n) steps; the root sends log2(n) times.
//   step 1:  0 -> 2, 1 -> 3
//   step 2:  0 -> 4, 1 -> 5, 2 -> 6, 3 -> 7
//
// Chain (large messages): 0 -> 1 -> 2 -> ... -> n-1, chunked, each rank forwarding a chunk as soon as it
// arrived: (n-1) + chunks - 1 chunk times, every link carries the message once.
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/chunking.h"

namespace tbcoll::algo {
namespace {

// The root's data: the root sends from send (copying it to recv when they differ); others receive into recv.
uint8_t* root_copy(Exec& exec, const Args& args) {
  const size_t bytes = args.count * args.elem_size;
  if (exec.rank() == args.root && args.send != args.recv && bytes > 0) std::memcpy(args.recv, args.send, bytes);
  return static_cast<uint8_t*>(args.recv);
}

}  // namespace

void broadcast_tree(Exec& exec, const Args& args) {
  const int n = exec.size();
  const int v = mod(exec.rank() - args.root, n);
  const size_t bytes = args.count * args.elem_size;
  uint8_t* data = root_copy(exec, args);
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      exec.wait(exec.irecv(mod(v - mask + args.root, n), data, bytes));
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask < n) exec.isend(mod(v + mask + args.root, n), data, bytes);
  }
  exec.wait_all();
}

void broadcast_chain(Exec& exec, const Args& args) {
  const int n = exec.size();
  const int v = mod(exec.rank() - args.root, n);
  const int prev = mod(exec.rank() - 1, n);
  const int next = mod(exec.rank() + 1, n);
  const size_t es = args.elem_size;
  uint8_t* data = root_copy(exec, args);
  auto pieces = chunks({0, args.count}, std::max<size_t>(1, exec.chunk_bytes() / es));
  if (v == 0) {
    for (Piece piece : pieces) exec.isend(next, data + piece.offset * es, piece.count * es);
  } else {
    std::vector<size_t> ids;
    for (Piece piece : pieces) ids.push_back(exec.irecv(prev, data + piece.offset * es, piece.count * es));
    for (size_t i = 0; i < pieces.size(); ++i) {
      exec.wait(ids[i]);
      if (v < n - 1) exec.isend(next, data + pieces[i].offset * es, pieces[i].count * es);
    }
  }
  exec.wait_all();
}

void barrier_dissemination(Exec& exec) {
  // Round k: send a token to r + 2^k, receive one from r - 2^k. ceil(log2 n) rounds, no payload.
  const int n = exec.size();
  const int r = exec.rank();
  static const uint8_t token = 0;
  for (int distance = 1; distance < n; distance <<= 1) {
    size_t got = exec.irecv(mod(r - distance, n), nullptr, 0);
    exec.isend(mod(r + distance, n), &token, 0);
    exec.wait(got);
  }
  exec.wait_all();
}

}  // namespace tbcoll::algo
