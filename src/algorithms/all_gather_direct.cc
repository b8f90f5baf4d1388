// Direct all-gather (small): every rank sends its block to every other rank in one step: the latency of one
// message, (n-1) sends per rank. Block b (count elements of rank b) lands at recv + b * count.
//
//       r0 <--B0/B1--> r1        1 step; each rank sends its block n-1 times and receives n-1 blocks.
//         \           /
//        B0/B2     B1/B2
//            \     /
//              r2
#include "algorithms/algorithms.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"

namespace tbcoll::algo {

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

TBCOLL_ALGORITHM(all_gather_direct) {
  Algorithm row;
  row.kind = OpKind::kAllGather;
  row.name = "direct";
  row.description = "every rank sends its block to every other: 1 step, (n-1)/n S sent per rank";
  row.run = all_gather_direct;
  row.cost = cost_all_gather_direct;
  row.position = 10;
  row.auto_range = direct_range;
  return row;
}

}  // namespace tbcoll::algo
