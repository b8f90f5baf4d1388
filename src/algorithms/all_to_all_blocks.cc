// The blocks an all_to_all / all_to_allv rank exchanges (see all_to_all_blocks.h).
#include "algorithms/all_to_all_blocks.h"

#include <cstring>

#include "algorithms/chunking.h"

namespace tbcoll::algo {

AllToAllBlocks all_to_all_blocks(Exec& exec, const Args& args, bool per_peer_counts) {
  const int n = exec.size();
  const int r = exec.rank();
  const size_t es = args.elem_size;
  const bool in_place = args.send == args.recv;
  const auto* send = static_cast<const uint8_t*>(args.send);
  auto* recv = static_cast<uint8_t*>(args.recv);
  AllToAllBlocks blocks;
  blocks.send_at.resize(n);
  blocks.send_bytes.resize(n);
  blocks.recv_at.resize(n);
  blocks.recv_bytes.resize(n);
  for (int p = 0; p < n; ++p) {
    const size_t block = args.count * es;
    // In place, the send side is the receive side (its counts and displacements).
    const size_t send_count = per_peer_counts ? (in_place ? args.recv_counts : args.send_counts)[p] : args.count;
    const size_t send_displ = per_peer_counts ? (in_place ? args.recv_displs : args.send_displs)[p] * es
                                              : static_cast<size_t>(p) * block;
    blocks.send_bytes[p] = send_count * es;
    blocks.send_at[p] = send + send_displ;
    blocks.recv_bytes[p] = (per_peer_counts ? args.recv_counts[p] : args.count) * es;
    blocks.recv_at[p] = recv + (per_peer_counts ? args.recv_displs[p] * es : static_cast<size_t>(p) * block);
  }
  if (in_place) {
    size_t staged = 0;
    for (int p = 0; p < n; ++p) staged += p == r ? 0 : blocks.send_bytes[p];
    auto* scratch = static_cast<uint8_t*>(exec.scratch().get(staged));
    for (int p = 0; p < n; ++p) {
      if (p == r || blocks.send_bytes[p] == 0) continue;
      std::memcpy(scratch, blocks.send_at[p], blocks.send_bytes[p]);
      blocks.send_at[p] = scratch;
      scratch += blocks.send_bytes[p];
    }
  } else if (blocks.send_bytes[r] > 0) {  // the argument checks made the own block's two counts equal
    std::memcpy(blocks.recv_at[r], blocks.send_at[r], blocks.send_bytes[r]);
  }
  return blocks;
}

// The direct exchange: every rank posts its n-1 receives and its n-1 sends at once and waits for them all:
//
//   r0 --B01--> r1    r0 --B02--> r2    ...    every pair exchanges its two blocks in the same step
//   r0 <--B10-- r1    r0 <--B20-- r2
//
// Cost: 1 step (the latency of one message, plus the time to push n-1 of them); each rank sends and receives
// (n-1)/n of its S bytes. For large blocks every receiver takes n-1 streams at once and the pairwise schedule
// does better. In place, the blocks for peers are first copied to scratch. all_to_allv exchanges one message
// per pair, empty ones too, so a peer whose count disagrees with this rank's is caught.
void all_to_all_exchange_direct(Exec& exec, const Args& args, bool per_peer_counts) {
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

// The pairwise exchange: step k = 1..n-1, rank i sends its block for i+k and receives the block of i-k. Every step is a permutation
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
void all_to_all_exchange_pairwise(Exec& exec, const Args& args, bool per_peer_counts) {
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

}  // namespace tbcoll::algo
