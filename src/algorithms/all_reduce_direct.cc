// Direct all-reduce for small messages: every rank sends its whole input to every other rank, then each
// reduces all n inputs in rank order 0, 1, ..., n-1, so results are bitwise identical everywhere.
//
//       r0 <----> r1          one step; each rank sends and receives (n-1) * bytes,
//        ^ \    / ^           and computes (n-1) * count reductions.
//        |   \/   |           Latency: one message time, which is what small all-reduces need.
//        v   /\   v
//       r3 <----> r2
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"
#include "reduce/reduce.h"

namespace tbcoll::algo {

void all_reduce_direct(Exec& exec, const Args& args) {
  const int n = exec.size();
  const int r = exec.rank();
  const size_t bytes = args.count * args.elem_size;
  auto* slots = static_cast<uint8_t*>(exec.scratch().get(static_cast<size_t>(n) * bytes));
  std::vector<const uint8_t*> inputs(n);
  for (int p = 0; p < n; ++p) inputs[p] = slots + static_cast<size_t>(p) * bytes;
  if (args.send == args.recv) {
    std::memcpy(slots + static_cast<size_t>(r) * bytes, args.send, bytes);  // dst is overwritten below
  } else {
    inputs[r] = static_cast<const uint8_t*>(args.send);
  }
  for (int k = 1; k < n; ++k) {
    int p = (r + k) % n;
    exec.irecv(p, slots + static_cast<size_t>(p) * bytes, bytes);
  }
  for (int k = 1; k < n; ++k) exec.isend((r + k) % n, args.send, bytes);
  exec.wait_all();

  reduce::reduce_ranks(args.recv, n, args.count, args.dtype, args.op, reduce::kernel(args.dtype, args.op),
                       [&](int p) { return inputs[p]; });
}

TBCOLL_ALGORITHM(all_reduce_direct) {
  Algorithm row;
  row.kind = OpKind::kAllReduce;
  row.name = "direct";
  row.description =
      "every rank sends its input to every other, each reduces all n in rank order: 1 step, "
      "(n-1)S sent per rank";
  row.run = all_reduce_direct;
  row.cost = cost_all_reduce_direct;
  row.position = 10;
  row.auto_range = direct_range;
  return row;
}

}  // namespace tbcoll::algo
