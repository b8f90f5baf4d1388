// Mesh one-shot all-reduce, for full-mesh cabling (every pair of hosts has its own link): every rank sends its
// whole input to every peer at once, chunk by chunk, and reduces each chunk of all n inputs locally, in rank
// order, as soon as it has arrived from everyone.
//
//       r0 <----> r1          one step: all n-1 links of a rank carry S at once, in both directions;
//        ^ \    / ^           each rank sends and receives (n-1) S and reduces (n-1) S.
//        |   \/   |           Time on a full mesh: alpha + S / link bandwidth (the ring: 2(n-1) alpha +
//        v   /\   v           2(n-1)/n S / bandwidth over one link), so it wins where links are many and
//       r3 <----> r2          latency dominates.
//
// Unlike `direct` (the same exchange in one message per peer, n S of scratch), the chunks pipeline the
// reduction with the transfer. Each peer's chunks land in a ring of mesh_depth() slots whose receives are posted
// ahead, about kMeshWindowBytes per peer (cost.h): where a link moves a message only into a posted receive (the
// link emulation; an RDMA rendezvous), it carries at most that window per round trip, so the window covers the
// bandwidth-delay product of the longest link tbcoll targets. Scratch is that window per peer (about n S for a
// message below it). Every rank folds the same n inputs in rank order (reduce_ranks), so results are bitwise
// identical everywhere.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/chunking.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"
#include "reduce/reduce.h"

namespace tbcoll::algo {

void all_reduce_mesh(Exec& exec, const Args& args) {
  const int n = exec.size();
  const int r = exec.rank();
  const size_t es = args.elem_size;
  const auto* src = static_cast<const uint8_t*>(args.send);
  auto* dst = static_cast<uint8_t*>(args.recv);
  const bool in_place = args.send == args.recv;
  const size_t chunk_elems = std::max<size_t>(1, exec.chunk_bytes() / es);
  const std::vector<Piece> pieces = chunks({0, args.count}, chunk_elems);
  const size_t slot_bytes = std::min(chunk_elems, args.count) * es;
  const size_t depth = std::max<size_t>(1, std::min(mesh_depth(chunk_elems * es), pieces.size()));
  // Peer p's chunk c lands in slot c % depth of p's row (rows in rank order without this rank's); an in-place
  // call copies its own chunk to the slot after the rows.
  auto* slots = static_cast<uint8_t*>(exec.scratch().get((static_cast<size_t>(n - 1) * depth + 1) * slot_bytes));
  auto slot = [&](int p, size_t c) {
    const size_t row = static_cast<size_t>(p < r ? p : p - 1);
    return slots + (p == r ? static_cast<size_t>(n - 1) * depth : row * depth + c % depth) * slot_bytes;
  };

  std::vector<size_t> recv_ids(pieces.size() * static_cast<size_t>(n));
  auto post = [&](size_t c) {
    for (int k = 1; k < n; ++k) {
      const int p = (r + k) % n;
      recv_ids[c * static_cast<size_t>(n) + static_cast<size_t>(p)] =
          exec.irecv(p, slot(p, c), pieces[c].count * es);
    }
  };
  for (size_t c = 0; c < std::min(depth, pieces.size()); ++c) post(c);
  std::vector<size_t> send_ids(in_place ? pieces.size() * static_cast<size_t>(n) : 0);
  for (size_t c = 0; c < pieces.size(); ++c) {
    for (int k = 1; k < n; ++k) {
      const size_t id = exec.isend((r + k) % n, src + pieces[c].offset * es, pieces[c].count * es);
      if (in_place) send_ids[c * static_cast<size_t>(n) + static_cast<size_t>(k)] = id;
    }
  }
  const reduce::Kernel kernel = reduce::kernel(args.dtype, args.op);
  for (size_t c = 0; c < pieces.size(); ++c) {
    const Piece piece = pieces[c];
    for (int k = 1; k < n; ++k) exec.wait(recv_ids[c * static_cast<size_t>(n) + static_cast<size_t>((r + k) % n)]);
    const uint8_t* own = src + piece.offset * es;
    if (in_place) {
      // Our chunk is about to be overwritten: its sends must be done, and the reduction reads a copy.
      for (int k = 1; k < n; ++k) exec.wait(send_ids[c * static_cast<size_t>(n) + static_cast<size_t>(k)]);
      std::memcpy(slot(r, 0), own, piece.count * es);
      own = slot(r, 0);
    }
    reduce::reduce_ranks(dst + piece.offset * es, n, piece.count, args.dtype, args.op, kernel,
                         [&](int p) { return p == r ? own : slot(p, c); });
    if (c + depth < pieces.size()) post(c + depth);
  }
  exec.wait_all();
}

TBCOLL_ALGORITHM(all_reduce_mesh) {
  Algorithm row;
  row.kind = OpKind::kAllReduce;
  row.name = "mesh";
  row.description =
      "one-shot over a full mesh: every rank sends its input to every peer at once, chunked, "
      "and reduces all n in rank order: 1 step, (n-1)S sent per rank over n-1 links";
  row.run = all_reduce_mesh;
  row.cost = cost_all_reduce_mesh;
  row.position = 50;
  row.auto_range = by_model;
  return row;
}

}  // namespace tbcoll::algo
