// All-gather schedules. Block b (count elements of rank b) lands at recv + b * count.
//
// Ring (large): step s = 0..n-2, send block (r-s) to r+1, receive block (r-s-1) from r-1 straight into
// place and forward it next step; chunked, so a chunk is forwarded as soon as it arrived.
//
//       r0 --B0--> r1 --B1--> r2 --B2--> r0        (step 0, n = 3)
//
//   n-1 steps; each rank sends and receives (n-1)/n of the gathered bytes. No scratch, no copies.
//
// Direct (small): every rank sends its block to every other rank in one step: latency of one message,
// (n-1) sends per rank.
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/chunking.h"

namespace tbcoll::algo {
namespace {

uint8_t* copy_own_block(const Args& args, int rank) {
  const size_t bytes = args.count * args.elem_size;
  auto* own = static_cast<uint8_t*>(args.recv) + static_cast<size_t>(rank) * bytes;
  if (args.send != own && bytes > 0) std::memcpy(own, args.send, bytes);
  return own;
}

}  // namespace

void all_gather_ring(Exec& exec, const Args& args) {
  const int n = exec.size();
  const int r = exec.rank();
  const int right = mod(r + 1, n);
  const int left = mod(r - 1, n);
  const size_t es = args.elem_size;
  auto* dst = static_cast<uint8_t*>(args.recv);
  const size_t chunk_elems = std::max<size_t>(1, exec.chunk_bytes() / es);
  auto block = [&](int b) { return Piece{static_cast<size_t>(b) * args.count, args.count}; };

  copy_own_block(args, r);
  std::vector<std::pair<int, Piece>> items;  // (step, piece) received, in order
  for (int s = 0; s < n - 1; ++s) {
    for (Piece piece : chunks(block(mod(r - s - 1, n)), chunk_elems)) items.push_back({s, piece});
  }
  std::vector<size_t> ids;
  ids.reserve(items.size());
  for (const auto& [step, piece] : items) ids.push_back(exec.irecv(left, dst + piece.offset * es, piece.count * es));
  for (Piece piece : chunks(block(r), chunk_elems)) exec.isend(right, dst + piece.offset * es, piece.count * es);
  for (size_t i = 0; i < items.size(); ++i) {
    exec.wait(ids[i]);
    const auto& [step, piece] = items[i];
    if (step < n - 2) exec.isend(right, dst + piece.offset * es, piece.count * es);
  }
  exec.wait_all();
}

void all_gather_direct(Exec& exec, const Args& args) {
  const int n = exec.size();
  const int r = exec.rank();
  const size_t bytes = args.count * args.elem_size;
  auto* dst = static_cast<uint8_t*>(args.recv);
  const uint8_t* own = copy_own_block(args, r);
  for (int k = 1; k < n; ++k) {
    int p = (r + k) % n;
    exec.irecv(p, dst + static_cast<size_t>(p) * bytes, bytes);
  }
  for (int k = 1; k < n; ++k) exec.isend((r + k) % n, own, bytes);
  exec.wait_all();
}

}  // namespace tbcoll::algo
