// tbcoll-rdma-check's zero-copy case: does this link carry the ibverbs transport's zero-copy sends?
//
// The transport sends a large message that lies in memory the caller registered (Communicator::register_memory)
// straight from there, as whole bulk slots of S bytes (the connection's slot size, 512 KiB by default): each slot
// one SEND of S bytes, one SGE, from a 16 KiB-aligned address inside the caller's registration, successive slots S
// apart, into a posted receive of exactly S bytes. Apple's peers (MLX's JACCL, llama.cpp) only ever send from
// their own page-aligned buffers, so on Apple's stack nobody has seen this work: TBCOLL_IB_ZERO_COPY leaves it off
// there until this case has passed between the user's Macs.
//
// The case sends what the transport's slots will, both ranks at once, after the link's other phases:
//
//   the caller's buffer, 4 S + 16 KiB, a pattern (registered apart, as the transport registers a caller's memory)
//   0   16K         S               2S  2S+16K          3S+16K          4S+16K
//   |---|-----------|---------------|---|---------------|---------------|
//   [send 0........][send 1........]
//       [send 2........]
//                                       [send 3........]
//
// Each SEND lands in one of 4 receives of S bytes the peer posted in its own registered buffer, which checks every
// byte against the pattern at the send's offset (so a send taken from another place than its SGE says shows too);
// a completion's byte_len is only an upper bound (Apple's is rounded up to whole 4 KiB frames, and not trusted).
// Cost: 4 S each way, three exchanges with the peer.
//
// S is 512 KiB, or 16 KiB (the smallest slot) where either port takes no SEND of 512 KiB (max_msg_sz); a port that
// takes no 16 KiB SEND has no bulk slots, hence no zero-copy sends: the case is skipped.
#pragma once

#include <array>
#include <cstddef>
#include <string>

#include "tools/rdma_diag/raw_link.h"

namespace tbcoll::ibverbs {

constexpr size_t kZeroCopySends = 4;

struct ZeroCopyResult {
  bool ok = false;          ///< every send arrived as sent, both ways
  bool skipped = false;     ///< no slot fits the link (largest_send below 16 KiB): nothing was sent
  bool apple = false;       ///< Apple's stack (librdma, rdma_enN), where TBCOLL_IB_ZERO_COPY is off by default
  bool by_default = false;  ///< TBCOLL_IB_ZERO_COPY=auto turns it on for this link (RC off Apple's stack)
  size_t slot_bytes = 0;    ///< S
  size_t largest_send = 0;  ///< the smaller of both ports' max_msg_sz (at most Apple's 16 MiB - 4 KiB)
  size_t sends = 0;         ///< per rank, when ok
  std::string failure;      ///< what failed where: a post's error, a completion's status, the first wrong byte
};

/// Where the case's sends start in the caller's buffer for slot size S: 0, S, 16 KiB, 16 KiB + 2 S.
std::array<size_t, kZeroCopySends> zero_copy_offsets(size_t slot_bytes);

/// The report's line (PASS, FAIL or SKIP), saying what to do with TBCOLL_IB_ZERO_COPY.
std::string format_zero_copy(const ZeroCopyResult& result);

}  // namespace tbcoll::ibverbs
