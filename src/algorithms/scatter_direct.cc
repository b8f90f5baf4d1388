// scatter, direct (large messages): block p (count elements) of the root's send goes to rank p.
//
//   r1 <--B1-- root --B2--> r2        1 step; the root sends (n-1)/n of the S bytes it holds, in n-1 messages
//               |                     posted at once; every other rank only receives its one block.
//               B3 to r3
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"

namespace tbcoll::algo {

void scatter_direct(Exec& exec, const Args& args) {
  const int n = exec.size();
  const int r = exec.rank();
  const size_t block = args.count * args.elem_size;
  if (r != args.root) {
    exec.wait(exec.irecv(args.root, args.recv, block));
    return;
  }
  const auto* send = static_cast<const uint8_t*>(args.send);
  for (int k = 1; k < n; ++k) {
    const int p = (r + k) % n;
    exec.isend(p, send + static_cast<size_t>(p) * block, block);
  }
  const uint8_t* own = send + static_cast<size_t>(r) * block;
  if (args.recv != own) std::memcpy(args.recv, own, block);  // else in place
  exec.wait_all();
}

TBCOLL_ALGORITHM(scatter_direct) {
  Algorithm row;
  row.kind = OpKind::kScatter;
  row.name = "direct";
  row.description = "the root sends every rank its block: 1 step, the root sends (n-1)/n S in n-1 messages";
  row.run = scatter_direct;
  row.cost = cost_gather_direct;
  row.position = 100;  // the last: it takes every size
  return row;
}

}  // namespace tbcoll::algo
