// gather, direct (large messages): block p (count elements) is rank p's; the root collects them at
// recv + p * count.
//
//   r1 --B1--> root <--B2-- r2        1 step; the root receives (n-1)/n of the S bytes it holds, in n-1 messages
//               ^                     posted at once (its link carries them back to back); every other rank
//               B3 from r3            only sends its one block.
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"

namespace tbcoll::algo {

void gather_direct(Exec& exec, const Args& args) {
  const int n = exec.size();
  const int r = exec.rank();
  const size_t block = args.count * args.elem_size;
  if (r != args.root) {
    exec.wait(exec.isend(args.root, args.send, block));
    return;
  }
  auto* recv = static_cast<uint8_t*>(args.recv);
  for (int k = 1; k < n; ++k) {
    const int p = (r + k) % n;
    exec.irecv(p, recv + static_cast<size_t>(p) * block, block);
  }
  uint8_t* own = recv + static_cast<size_t>(r) * block;
  if (args.send != own) std::memcpy(own, args.send, block);  // else in place
  exec.wait_all();
}

TBCOLL_ALGORITHM(gather_direct) {
  Algorithm row;
  row.kind = OpKind::kGather;
  row.name = "direct";
  row.description =
      "every rank sends its block to the root: 1 step, the root receives (n-1)/n S in n-1 "
      "messages";
  row.run = gather_direct;
  row.cost = cost_gather_direct;
  row.position = 100;  // the last: it takes every size
  return row;
}

}  // namespace tbcoll::algo
