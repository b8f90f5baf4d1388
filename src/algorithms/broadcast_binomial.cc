// Binomial-tree broadcast (small messages), in ranks relative to the root (v = (r - root) mod n): v receives
// from v - 2^k (its highest set bit k), then sends to v + 2^j for every j < k, the classic doubling:
//
//   step 0:  0 -> 1            ceil(log2 n) steps; the root sends log2(n) times.
//   step 1:  0 -> 2, 1 -> 3
//   step 2:  0 -> 4, 1 -> 5, 2 -> 6, 3 -> 7
#include "algorithms/algorithms.h"
#include "algorithms/chunking.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"

namespace tbcoll::algo {

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

TBCOLL_ALGORITHM(broadcast_binomial) {
  Algorithm row;
  row.kind = OpKind::kBroadcast;
  row.name = "binomial";
  row.description = "binomial tree from the root: ceil(log2 n) steps of S";
  row.run = broadcast_tree;
  row.cost = cost_broadcast_binomial;
  row.position = 10;
  row.auto_range = binomial_range;
  return row;
}

}  // namespace tbcoll::algo
