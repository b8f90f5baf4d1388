// all_to_all, pairwise exchange (large blocks): step k = 1..n-1, rank i sends its block for i+k and receives
// the block of i-k (the exchange and its picture: all_to_all_blocks.cc). n-1 steps; each rank sends and
// receives (n-1)/n of its S bytes, one message at a time.
#include "algorithms/algorithms.h"
#include "algorithms/all_to_all_blocks.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"

namespace tbcoll::algo {

void all_to_all_pairwise(Exec& exec, const Args& args) { all_to_all_exchange_pairwise(exec, args, false); }

TBCOLL_ALGORITHM(all_to_all_pairwise) {
  Algorithm row;
  row.kind = OpKind::kAllToAll;
  row.name = "pairwise";
  row.description = "step k: block to r+k, block from r-k: n-1 steps, (n-1)/n S sent per rank";
  row.run = all_to_all_pairwise;
  row.cost = cost_all_to_all_pairwise;
  row.position = 100;  // the last: it takes every size
  return row;
}

}  // namespace tbcoll::algo
