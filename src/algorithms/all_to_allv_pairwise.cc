// all_to_allv, pairwise: all_to_all's pairwise exchange with per-peer counts (all_to_all_blocks.cc); one message
// per pair and step, empty ones too, so a peer whose count disagrees with this rank's is caught by the receive's
// size check.
#include "algorithms/algorithms.h"
#include "algorithms/all_to_all_blocks.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"

namespace tbcoll::algo {

void all_to_allv_pairwise(Exec& exec, const Args& args) { all_to_all_exchange_pairwise(exec, args, true); }

TBCOLL_ALGORITHM(all_to_allv_pairwise) {
  Algorithm row;
  row.kind = OpKind::kAllToAllv;
  row.name = "pairwise";
  row.description = "step k: block to r+k, block from r-k: n-1 steps, each byte sent once";
  row.run = all_to_allv_pairwise;
  row.cost = cost_all_to_all_pairwise;
  row.position = 100;  // the last: it takes every size
  return row;
}

}  // namespace tbcoll::algo
