// Hierarchical all-reduce for jobs with several ranks per host: reduce inside each host to its leader (its
// lowest rank), all-reduce across hosts by a ring of the leaders, then send the result back inside the host.
// Hosts are as the communicator grouped its ranks (equal host ids; TBCOLL_HOST_ID can pretend).
//
//        host A              host B                   1. members -> leader, chunked; the leader folds its
//   [a0] <- a1 <- a2    [b0] <- b1 <- b2                 host's inputs in rank order (shm inside a host)
//     a0 <==== ring ====> b0                          2. ring all-reduce among the leaders (the slow links)
//   [a0] -> a1 -> a2    [b0] -> b1 -> b2              3. leader -> members
//
// Cost with H hosts of L ranks: 1 + 2(H-1) + 1 steps. Across hosts each leader sends and receives 2(H-1)/H S,
// 2(H-1) S in all: for 2 hosts x 2 ranks, 2 S against the flat ring's 3 S when each host's ranks are
// consecutive and 6 S when they alternate (every ring link then crosses). 2(H-1) S is the least any schedule
// can move (each host needs S of every other host's data). Inside a host each leader receives and sends
// (L-1) S. Each element is reduced once, by a fixed tree (rank order inside a host, the ring's chain across),
// and copied from there, so every rank ends with bitwise identical results; avg divides once at the leaders.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/chunking.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"
#include "algorithms/topology.h"
#include "reduce/reduce.h"

namespace tbcoll::algo {
namespace {

constexpr size_t kDepth = 2;  // chunks in flight per member

}  // namespace

void all_reduce_hierarchical(Exec& exec, const Args& args) {
  const int r = exec.rank();
  const size_t es = args.elem_size;
  const size_t bytes = args.count * es;
  const auto* src = static_cast<const uint8_t*>(args.send);
  auto* dst = static_cast<uint8_t*>(args.recv);
  const std::vector<std::vector<int>> hosts = hosts_of(exec);
  const std::vector<int>& local = hosts[static_cast<size_t>(exec.host_of(r))];
  const int leader = local[0];
  const size_t chunk_elems = std::max<size_t>(1, exec.chunk_bytes() / es);
  const std::vector<Piece> pieces = chunks({0, args.count}, chunk_elems);

  if (r != leader) {
    for (Piece piece : pieces) exec.isend(leader, src + piece.offset * es, piece.count * es);
    exec.wait_all();  // in place, the result lands where the input was
    exec.wait(exec.irecv(leader, dst, bytes));
    return;
  }
  // Sums inside and across hosts; an average divides once, by the world size, at the end.
  const ReduceOp op = args.op == ReduceOp::kAvg ? ReduceOp::kSum : args.op;
  const int members = static_cast<int>(local.size());
  if (members == 1) {
    if (dst != src) std::memcpy(dst, src, bytes);
  } else {
    const size_t slot_bytes = std::min(chunk_elems, args.count) * es;
    auto* slots = static_cast<uint8_t*>(exec.scratch().get(static_cast<size_t>(members) * kDepth * slot_bytes));
    auto slot = [&](int m, size_t c) { return slots + (static_cast<size_t>(m) * kDepth + c % kDepth) * slot_bytes; };
    std::vector<size_t> ids(pieces.size() * static_cast<size_t>(members));
    auto post = [&](size_t c) {
      for (int m = 1; m < members; ++m) {
        ids[c * static_cast<size_t>(members) + static_cast<size_t>(m)] =
            exec.irecv(local[static_cast<size_t>(m)], slot(m, c), pieces[c].count * es);
      }
    };
    for (size_t c = 0; c < std::min(kDepth, pieces.size()); ++c) post(c);
    const reduce::Kernel kernel = reduce::kernel(args.dtype, op);
    for (size_t c = 0; c < pieces.size(); ++c) {
      const Piece piece = pieces[c];
      for (int m = 1; m < members; ++m) exec.wait(ids[c * static_cast<size_t>(members) + static_cast<size_t>(m)]);
      // The leader is input 0: in place, out is exactly that input, which reduce_ranks allows.
      reduce::reduce_ranks(dst + piece.offset * es, members, piece.count, args.dtype, op, kernel, [&](int m) {
        return m == 0 ? src + piece.offset * es : slot(m, c);
      });
      if (c + kDepth < pieces.size()) post(c + kDepth);
    }
  }
  if (hosts.size() > 1) {
    std::vector<int> leaders;
    for (const std::vector<int>& host : hosts) leaders.push_back(host[0]);
    Args across = args;
    across.send = dst;
    across.op = op;
    ring_all_reduce(exec, across, leaders);
  }
  if (args.op == ReduceOp::kAvg) reduce::divide(dst, dst, args.count, args.dtype, exec.size());
  for (int m = 1; m < members; ++m) exec.isend(local[static_cast<size_t>(m)], dst, bytes);
  exec.wait_all();
}

TBCOLL_ALGORITHM(all_reduce_hierarchical) {
  Algorithm row;
  row.kind = OpKind::kAllReduce;
  row.name = "hierarchical";
  row.description =
      "reduce to one leader per host, ring of the leaders across hosts, back inside the host: 2 "
      "+ 2(H-1) steps for H hosts, 2(H-1) S across hosts in all";
  row.run = all_reduce_hierarchical;
  row.cost = cost_all_reduce_hierarchical;
  row.position = 60;
  row.auto_range = by_model;
  row.cannot_run = needs_hosts_with_several_ranks;
  return row;
}

}  // namespace tbcoll::algo
