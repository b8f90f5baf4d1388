// The blocks an all_to_all / all_to_allv rank exchanges (see all_to_all_blocks.h).
#include "algorithms/all_to_all_blocks.h"

#include <cstring>

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

}  // namespace tbcoll::algo
