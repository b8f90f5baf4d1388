// gather and scatter, direct (large messages). Block p (count elements) is rank p's: gather collects them at
// recv + p * count on the root, scatter hands block p of the root's send to rank p.
//
//   gather:   r1 --B1--> root <--B2-- r2        scatter:   r1 <--B1-- root --B2--> r2
//                         ^                                             |
//                         B3 from r3                                    B3 to r3
//
// Cost: 1 step; the root receives (gather) or sends (scatter) (n-1)/n of the S bytes it holds, every other rank
// sends or receives its one block. The root's n-1 messages are all posted at once, so its link carries them
// back to back. A non-root rank of gather only sends, and one of scatter only receives.
#include <cstring>

#include "algorithms/algorithms.h"

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

}  // namespace tbcoll::algo
