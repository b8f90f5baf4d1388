// all_to_allv, direct: all_to_all's direct exchange with per-peer counts (all_to_all_blocks.cc). One message per
// pair, empty ones too, so a peer whose count disagrees with this rank's is caught. The tuner never picks it on
// its own: the ranks' byte counts differ, so ranks choosing by size would not match.
#include "algorithms/algorithms.h"
#include "algorithms/all_to_all_blocks.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"

namespace tbcoll::algo {

void all_to_allv_direct(Exec& exec, const Args& args) { all_to_all_exchange_direct(exec, args, true); }

TBCOLL_ALGORITHM(all_to_allv_direct) {
  Algorithm row;
  row.kind = OpKind::kAllToAllv;
  row.name = "direct";
  row.description =
      "every rank posts its n-1 sends and receives at once: 1 step (only when forced: the "
      "ranks' sizes differ)";
  row.run = all_to_allv_direct;
  row.cost = cost_all_to_all_direct;
  row.position = 10;
  row.auto_range = forced_only;
  return row;
}

}  // namespace tbcoll::algo
