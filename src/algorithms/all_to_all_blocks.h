// What one rank of an all_to_all or all_to_allv exchanges with each peer, shared by the pairwise and direct
// schedules: per peer, the bytes to send and where they are, the bytes to receive and where they go.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/exec.h"

namespace tbcoll::algo {

struct AllToAllBlocks {
  std::vector<const uint8_t*> send_at;
  std::vector<size_t> send_bytes;
  std::vector<uint8_t*> recv_at;
  std::vector<size_t> recv_bytes;
};

/// The blocks of the call (per_peer_counts: all_to_allv's counts and displacements; else count each, packed in
/// rank order). Copies this rank's own block from send to recv. In place (send == recv), the blocks for peers
/// are first copied to scratch and sent from there, since the received ones overwrite them.
AllToAllBlocks all_to_all_blocks(Exec& exec, const Args& args, bool per_peer_counts);

/// The direct exchange of all_to_all (per_peer_counts false) and all_to_allv (true): see all_to_all_blocks.cc.
void all_to_all_exchange_direct(Exec& exec, const Args& args, bool per_peer_counts);
/// The pairwise exchange of all_to_all and all_to_allv: see all_to_all_blocks.cc.
void all_to_all_exchange_pairwise(Exec& exec, const Args& args, bool per_peer_counts);

}  // namespace tbcoll::algo
