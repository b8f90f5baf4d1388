// reduce_scatter and reduce, by direct exchange.
//
// reduce_scatter: rank r sends block p of its input to every rank p and receives block r from every peer,
// then reduces the n blocks in rank order into recv.
//
//       r0: [B0 B1 B2] --B1--> r1, --B2--> r2        one step; each rank sends and receives (n-1)/n of the
//       r1: [B0 B1 B2] --B0--> r0, --B2--> r2        input (bandwidth-optimal, like the ring's reduce-scatter
//       r2: [B0 B1 B2] --B0--> r0, --B1--> r1        phase) and reduces (n-1)/n * count elements.
//
// reduce: every rank sends its input to the root, which reduces the n inputs in rank order (root receives
// (n-1) inputs: fine for the small world sizes of a host or a Mac cluster; a reduce-scatter + gather schedule
// would spread the load for large n).
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "reduce/reduce.h"

namespace tbcoll::algo {
namespace {

// out = inputs[0] op inputs[1] op ... in rank order; then / n for avg.
void reduce_in_rank_order(const Args& args, int n, const std::vector<const uint8_t*>& inputs, void* out) {
  reduce::reduce_ranks(out, n, args.count, args.dtype, args.op, reduce::kernel(args.dtype, args.op),
                       [&](int p) { return inputs[p]; });
}

}  // namespace

void reduce_scatter_direct(Exec& exec, const Args& args) {
  const int n = exec.size();
  const int r = exec.rank();
  const size_t block = args.count * args.elem_size;
  const auto* send = static_cast<const uint8_t*>(args.send);
  auto* slots = static_cast<uint8_t*>(exec.scratch().get(static_cast<size_t>(n) * block));
  std::vector<const uint8_t*> inputs(n);
  for (int p = 0; p < n; ++p) inputs[p] = slots + static_cast<size_t>(p) * block;
  // Our own block r: straight from send, unless recv is that block (in place), which the reduction overwrites.
  if (args.recv == send + static_cast<size_t>(r) * block) {
    std::memcpy(slots + static_cast<size_t>(r) * block, send + static_cast<size_t>(r) * block, block);
  } else {
    inputs[r] = send + static_cast<size_t>(r) * block;
  }
  for (int k = 1; k < n; ++k) {
    int p = (r + k) % n;
    exec.irecv(p, slots + static_cast<size_t>(p) * block, block);
  }
  for (int k = 1; k < n; ++k) {
    int p = (r + k) % n;
    exec.isend(p, send + static_cast<size_t>(p) * block, block);
  }
  exec.wait_all();
  reduce_in_rank_order(args, n, inputs, args.recv);
}

void reduce_direct(Exec& exec, const Args& args) {
  const int n = exec.size();
  const int r = exec.rank();
  const size_t bytes = args.count * args.elem_size;
  if (r != args.root) {
    exec.wait(exec.isend(args.root, args.send, bytes));
    return;
  }
  auto* slots = static_cast<uint8_t*>(exec.scratch().get(static_cast<size_t>(n) * bytes));
  std::vector<const uint8_t*> inputs(n);
  for (int p = 0; p < n; ++p) inputs[p] = slots + static_cast<size_t>(p) * bytes;
  if (args.send == args.recv) {
    std::memcpy(slots + static_cast<size_t>(r) * bytes, args.send, bytes);
  } else {
    inputs[r] = static_cast<const uint8_t*>(args.send);
  }
  for (int k = 1; k < n; ++k) {
    int p = (r + k) % n;
    exec.irecv(p, slots + static_cast<size_t>(p) * bytes, bytes);
  }
  exec.wait_all();
  reduce_in_rank_order(args, n, inputs, args.recv);
}

}  // namespace tbcoll::algo
