// all_to_all and all_to_allv, pairwise exchange (large blocks).
//
// Step k = 1..n-1: rank i sends its block for i+k and receives the block of i-k. Every step is a permutation
// of the ranks, so each rank sends one message and receives one at a time, and no link or receiver is asked
// to take n-1 messages at once:
//
//        step 1            step 2            step 3            (n = 4)
//   r0 -> r1  r0 <- r3   r0 -> r2  r0 <- r2   r0 -> r3  r0 <- r1
//   r1 -> r2  r1 <- r0   r1 -> r3  r1 <- r3   r1 -> r0  r1 <- r2
//   ...
//
// The receives are all posted up front (each lands in its final place, no copies); a step's send goes once
// the previous step's exchange finished. Cost: n-1 steps; each rank sends and receives (n-1)/n of its S bytes
// (S = the whole send buffer), the least any schedule can. In place, the blocks for peers are first copied to
// scratch (S bytes). all_to_allv exchanges one message per pair, empty ones too, so a peer whose count
// disagrees with this rank's is caught by the receive's size check.
#include "algorithms/algorithms.h"
#include "algorithms/all_to_all_blocks.h"
#include "algorithms/chunking.h"

namespace tbcoll::algo {
namespace {

void pairwise(Exec& exec, const Args& args, bool per_peer_counts) {
  const int n = exec.size();
  const int r = exec.rank();
  const AllToAllBlocks blocks = all_to_all_blocks(exec, args, per_peer_counts);
  std::vector<size_t> received(n);
  for (int k = 1; k < n; ++k) {
    const int from = mod(r - k, n);
    received[from] = exec.irecv(from, blocks.recv_at[from], blocks.recv_bytes[from]);
  }
  for (int k = 1; k < n; ++k) {
    const int to = mod(r + k, n);
    const int from = mod(r - k, n);
    const size_t sent = exec.isend(to, blocks.send_at[to], blocks.send_bytes[to]);
    exec.wait(received[from]);
    exec.wait(sent);
  }
  exec.wait_all();
}

}  // namespace

void all_to_all_pairwise(Exec& exec, const Args& args) { pairwise(exec, args, false); }
void all_to_allv_pairwise(Exec& exec, const Args& args) { pairwise(exec, args, true); }

}  // namespace tbcoll::algo
