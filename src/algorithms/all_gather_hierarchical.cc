// Hierarchical all-gather for jobs with several ranks per host: gather each host's blocks at its leader (its
// lowest rank), pass whole hosts' blocks around a ring of the leaders, then send the gathered result back inside
// the host. Hosts are as the communicator grouped its ranks (equal host ids; TBCOLL_HOST_ID can pretend).
//
//        host A              host B                   1. members -> leader: their blocks (shm inside a host)
//   [a0] <- a1 <- a2    [b0] <- b1 <- b2              2. ring of the leaders: step s forwards host (h-s)'s
//     a0 <==== ring ====> b0                             blocks to the right (H-1 steps)
//   [a0] -> a1 -> a2    [b0] -> b1 -> b2              3. leader -> members: all n blocks
//
// Cost with H hosts of L ranks and blocks of B bytes (S = n B gathered): 1 + (H-1) + 1 steps. Across hosts each
// leader receives the (H-1) L blocks of the other hosts once, (H-1)/H S, the least possible; a flat ring whose
// ranks alternate between hosts moves (n-1)/n S over every one of its n crossing links. Inside a host the leader
// receives (L-1) B and sends (L-1) S.
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/chunking.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"

namespace tbcoll::algo {

void all_gather_hierarchical(Exec& exec, const Args& args) {
  const int r = exec.rank();
  const int n = exec.size();
  const size_t block = args.count * args.elem_size;
  auto* dst = static_cast<uint8_t*>(args.recv);
  const std::vector<std::vector<int>> hosts = hosts_of(exec);
  const int host = exec.host_of(r);
  const std::vector<int>& local = hosts[static_cast<size_t>(host)];
  const int leader = local[0];
  auto at = [&](int p) { return dst + static_cast<size_t>(p) * block; };

  if (r != leader) {
    exec.wait(exec.isend(leader, args.send, block));  // in place, the send is our block of recv
    exec.wait(exec.irecv(leader, dst, static_cast<size_t>(n) * block));
    return;
  }
  if (args.send != at(r)) std::memcpy(at(r), args.send, block);
  for (size_t m = 1; m < local.size(); ++m) exec.irecv(local[m], at(local[m]), block);
  exec.wait_all();
  // Ring of the leaders, one host's blocks per step: step s sends host (h - s)'s blocks to the right and
  // receives host (h - s - 1)'s from the left, each block a message, in rank order.
  const int h = host, count = static_cast<int>(hosts.size());
  const int right = hosts[static_cast<size_t>(mod(h + 1, count))][0];
  const int left = hosts[static_cast<size_t>(mod(h - 1, count))][0];
  for (int s = 0; s + 1 < count; ++s) {
    for (int p : hosts[static_cast<size_t>(mod(h - s - 1, count))]) exec.irecv(left, at(p), block);
    for (int p : hosts[static_cast<size_t>(mod(h - s, count))]) exec.isend(right, at(p), block);
    exec.wait_all();
  }
  for (size_t m = 1; m < local.size(); ++m) exec.isend(local[m], dst, static_cast<size_t>(n) * block);
  exec.wait_all();
}

TBCOLL_ALGORITHM(all_gather_hierarchical) {
  Algorithm row;
  row.kind = OpKind::kAllGather;
  row.name = "hierarchical";
  row.description =
      "gather at one leader per host, ring of the leaders with whole hosts' blocks, back inside "
      "the host: 2 + (H-1) steps for H hosts, (H-1)/H S received per leader";
  row.run = all_gather_hierarchical;
  row.cost = cost_all_gather_hierarchical;
  row.position = 20;
  row.auto_range = by_model;
  row.cannot_run = needs_hosts_with_several_ranks;
  return row;
}

}  // namespace tbcoll::algo
