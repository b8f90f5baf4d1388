// Dissemination barrier: round k, a token to r + 2^k and one from r - 2^k; after ceil(log2 n) rounds every rank
// has heard, directly or through others, from every rank.
//
//   round 0:  0 -> 1 -> 2 -> 3 -> 0       ceil(log2 n) rounds of one empty message each way; no payload.
//   round 1:  0 -> 2, 1 -> 3, 2 -> 0, 3 -> 1
#include "algorithms/algorithms.h"
#include "algorithms/chunking.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"

namespace tbcoll::algo {

void barrier_dissemination(Exec& exec, const Args&) {
  // Round k: send a token to r + 2^k, receive one from r - 2^k. ceil(log2 n) rounds, no payload.
  const int n = exec.size();
  const int r = exec.rank();
  static const uint8_t token = 0;
  for (int distance = 1; distance < n; distance <<= 1) {
    size_t got = exec.irecv(mod(r - distance, n), nullptr, 0);
    exec.isend(mod(r + distance, n), &token, 0);
    exec.wait(got);
  }
  exec.wait_all();
}

TBCOLL_ALGORITHM(barrier_dissemination) {
  Algorithm row;
  row.kind = OpKind::kBarrier;
  row.name = "dissemination";
  row.description = "round k: token to r+2^k, from r-2^k: ceil(log2 n) steps, no payload";
  row.run = barrier_dissemination;
  row.cost = cost_barrier_dissemination;
  row.position = 100;
  return row;
}

}  // namespace tbcoll::algo
