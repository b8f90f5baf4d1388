// reduce_scatter by direct exchange: rank r sends block p of its input to every rank p and receives block r from
// every peer, then reduces the n blocks in rank order into recv.
//
//       r0: [B0 B1 B2] --B1--> r1, --B2--> r2        one step; each rank sends and receives (n-1)/n of the
//       r1: [B0 B1 B2] --B0--> r0, --B2--> r2        input (bandwidth-optimal, like the ring's reduce-scatter
//       r2: [B0 B1 B2] --B0--> r0, --B1--> r1        phase) and reduces (n-1)/n * count elements.
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"
#include "reduce/reduce.h"

namespace tbcoll::algo {

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
  reduce::reduce_ranks(args.recv, n, args.count, args.dtype, args.op, reduce::kernel(args.dtype, args.op),
                       [&](int p) { return inputs[p]; });
}

TBCOLL_ALGORITHM(reduce_scatter_direct) {
  Algorithm row;
  row.kind = OpKind::kReduceScatter;
  row.name = "direct";
  row.description =
      "block p of every rank sent to rank p, reduced there in rank order: 1 step, (n-1)/n S "
      "sent per rank";
  row.run = reduce_scatter_direct;
  row.cost = cost_reduce_scatter_direct;
  row.position = 100;
  return row;
}

}  // namespace tbcoll::algo
