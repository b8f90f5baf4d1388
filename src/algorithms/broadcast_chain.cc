// Chain broadcast (large messages): root -> root+1 -> ... -> root-1, chunked, each rank forwarding a chunk as
// soon as it arrived:
//
//   r0 --c0--> r1 --c0--> r2 --c0--> r3        (n-1) + chunks - 1 chunk times; every link carries the
//   r0 --c1--> r1 --c1--> r2                   message once.
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/chunking.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"

namespace tbcoll::algo {

void broadcast_chain(Exec& exec, const Args& args) {
  const int n = exec.size();
  const int v = mod(exec.rank() - args.root, n);
  const int prev = mod(exec.rank() - 1, n);
  const int next = mod(exec.rank() + 1, n);
  const size_t es = args.elem_size;
  uint8_t* data = root_copy(exec, args);
  auto pieces = chunks({0, args.count}, std::max<size_t>(1, exec.chunk_bytes() / es));
  if (v == 0) {
    for (Piece piece : pieces) exec.isend(next, data + piece.offset * es, piece.count * es);
  } else {
    std::vector<size_t> ids;
    for (Piece piece : pieces) ids.push_back(exec.irecv(prev, data + piece.offset * es, piece.count * es));
    for (size_t i = 0; i < pieces.size(); ++i) {
      exec.wait(ids[i]);
      if (v < n - 1) exec.isend(next, data + pieces[i].offset * es, pieces[i].count * es);
    }
  }
  exec.wait_all();
}

TBCOLL_ALGORITHM(broadcast_chain) {
  Algorithm row;
  row.kind = OpKind::kBroadcast;
  row.name = "chain";
  row.description =
      "root -> next -> ... chunked and pipelined: n-2 + S/chunk chunk times, every link carries "
      "S once";
  row.run = broadcast_chain;
  row.cost = cost_broadcast_chain;
  row.position = 100;  // the last: it takes every size
  return row;
}

}  // namespace tbcoll::algo
