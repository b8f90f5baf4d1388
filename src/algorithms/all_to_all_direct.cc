// all_to_all, direct (small blocks): every rank posts its n-1 receives and its n-1 sends at once and waits for
// them all (the exchange and its picture: all_to_all_blocks.cc). 1 step; each rank sends and receives (n-1)/n of
// its S bytes. For large blocks every receiver takes n-1 streams at once: the pairwise schedule does better.
#include "algorithms/algorithms.h"
#include "algorithms/all_to_all_blocks.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"

namespace tbcoll::algo {

void all_to_all_direct(Exec& exec, const Args& args) { all_to_all_exchange_direct(exec, args, false); }

TBCOLL_ALGORITHM(all_to_all_direct) {
  Algorithm row;
  row.kind = OpKind::kAllToAll;
  row.name = "direct";
  row.description = "every rank posts its n-1 sends and receives at once: 1 step, (n-1)/n S sent per rank";
  row.run = all_to_all_direct;
  row.cost = cost_all_to_all_direct;
  row.position = 10;
  row.auto_range = direct_range;
  return row;
}

}  // namespace tbcoll::algo
