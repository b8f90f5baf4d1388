// all_to_all and all_to_allv, direct (small blocks).
//
// Every rank posts its n-1 receives and its n-1 sends at once and waits for them all:
//
//   r0 --B01--> r1    r0 --B02--> r2    ...    every pair exchanges its two blocks in the same step
//   r0 <--B10-- r1    r0 <--B20-- r2
//
// Cost: 1 step (the latency of one message, plus the time to push n-1 of them); each rank sends and receives
// (n-1)/n of its S bytes. For large blocks every receiver takes n-1 streams at once and the pairwise schedule
// does better. In place, the blocks for peers are first copied to scratch. all_to_allv exchanges one message
// per pair, empty ones too, so a peer whose count disagrees with this rank's is caught.
#include "algorithms/algorithms.h"
#include "algorithms/all_to_all_blocks.h"

namespace tbcoll::algo {
namespace {

void direct(Exec& exec, const Args& args, bool per_peer_counts) {
  const int n = exec.size();
  const int r = exec.rank();
  const AllToAllBlocks blocks = all_to_all_blocks(exec, args, per_peer_counts);
  for (int k = 1; k < n; ++k) {
    const int from = (r - k + n) % n;
    exec.irecv(from, blocks.recv_at[from], blocks.recv_bytes[from]);
  }
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n;
    exec.isend(to, blocks.send_at[to], blocks.send_bytes[to]);
  }
  exec.wait_all();
}

}  // namespace

void all_to_all_direct(Exec& exec, const Args& args) { direct(exec, args, false); }
void all_to_allv_direct(Exec& exec, const Args& args) { direct(exec, args, true); }

}  // namespace tbcoll::algo
