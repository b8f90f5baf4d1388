// Ring all-gather (large): step s = 0..n-2, send block (r-s) to r+1, receive block (r-s-1) from r-1 straight
// into place and forward it next step; chunked, so a chunk is forwarded as soon as it arrived. Block b (count
// elements of rank b) lands at recv + b * count.
//
//       r0 --B0--> r1 --B1--> r2 --B2--> r0        (step 0, n = 3)
//
//   n-1 steps; each rank sends and receives (n-1)/n of the gathered bytes. No scratch, no copies.
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/chunking.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"

namespace tbcoll::algo {

void all_gather_ring(Exec& exec, const Args& args) {
  const int n = exec.size();
  const int r = exec.rank();
  const int right = mod(r + 1, n);
  const int left = mod(r - 1, n);
  const size_t es = args.elem_size;
  auto* dst = static_cast<uint8_t*>(args.recv);
  const size_t chunk_elems = std::max<size_t>(1, exec.chunk_bytes() / es);
  auto block = [&](int b) { return Piece{static_cast<size_t>(b) * args.count, args.count}; };

  copy_own_block(args, r);
  std::vector<std::pair<int, Piece>> items;  // (step, piece) received, in order
  for (int s = 0; s < n - 1; ++s) {
    for (Piece piece : chunks(block(mod(r - s - 1, n)), chunk_elems)) items.push_back({s, piece});
  }
  std::vector<size_t> ids;
  ids.reserve(items.size());
  for (const auto& [step, piece] : items) ids.push_back(exec.irecv(left, dst + piece.offset * es, piece.count * es));
  for (Piece piece : chunks(block(r), chunk_elems)) exec.isend(right, dst + piece.offset * es, piece.count * es);
  for (size_t i = 0; i < items.size(); ++i) {
    exec.wait(ids[i]);
    const auto& [step, piece] = items[i];
    if (step < n - 2) exec.isend(right, dst + piece.offset * es, piece.count * es);
  }
  exec.wait_all();
}

TBCOLL_ALGORITHM(all_gather_ring) {
  Algorithm row;
  row.kind = OpKind::kAllGather;
  row.name = "ring";
  row.description = "blocks forwarded around the ring, chunked: n-1 steps, (n-1)/n S sent per rank";
  row.run = all_gather_ring;
  row.cost = cost_all_gather_ring;
  row.position = 100;  // the last: it takes every size
  return row;
}

}  // namespace tbcoll::algo
