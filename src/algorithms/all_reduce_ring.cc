// Ring all-reduce: reduce-scatter then all-gather around the ring r -> r+1, chunked and pipelined.
//
//   count split into n segments S0..S(n-1); each segment into chunks of TBCOLL_CHUNK_BYTES.
//   reduce-scatter, step s = 0..n-2:  send S(r-s) to r+1, receive S(r-s-1) from r-1, dst = src op received
//   all-gather,     step s = 0..n-2:  send S(r+1-s) to r+1, receive final S(r-s) from r-1 straight into dst
//
//       r0 --S0--> r1 --S1--> r2 --S2--> r0        (step 0 of reduce-scatter, n = 3)
//
// Cost: 2(n-1) steps, each rank sends and receives 2(n-1)/n * bytes; (n-1)/n * bytes of reduction.
// Pipelining: received chunk k is reduced (and forwarded) while chunks k+1.. are still arriving; up to
// kDepth receive buffers are in flight. Each segment is reduced once, by a fixed chain of ranks, and then
// copied around, so every rank ends with bitwise identical results. Avg divides once, at the owner.
// ring_all_reduce runs the same schedule over a subset of the ranks (the hierarchical schedule's leaders).
#include <algorithm>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/chunking.h"
#include "reduce/reduce.h"

namespace tbcoll::algo {
namespace {

constexpr size_t kDepth = 4;

struct RecvItem {
  bool reduce;  // reduce-scatter item (into a scratch slot) or all-gather item (straight into dst)
  int step;
  Piece piece;
};

}  // namespace

void all_reduce_ring(Exec& exec, const Args& args) {
  std::vector<int> everyone(static_cast<size_t>(exec.size()));
  for (int p = 0; p < exec.size(); ++p) everyone[static_cast<size_t>(p)] = p;
  ring_all_reduce(exec, args, everyone);
}

void ring_all_reduce(Exec& exec, const Args& args, const std::vector<int>& ring) {
  const int n = static_cast<int>(ring.size());
  const int r = static_cast<int>(std::find(ring.begin(), ring.end(), exec.rank()) - ring.begin());
  const int right = ring[static_cast<size_t>(mod(r + 1, n))];
  const int left = ring[static_cast<size_t>(mod(r - 1, n))];
  const size_t es = args.elem_size;
  const auto* src = static_cast<const uint8_t*>(args.send);
  auto* dst = static_cast<uint8_t*>(args.recv);
  const size_t chunk_elems = std::max<size_t>(1, exec.chunk_bytes() / es);
  const reduce::Kernel kernel = reduce::kernel(args.dtype, args.op);

  std::vector<RecvItem> items;
  for (int s = 0; s < n - 1; ++s) {
    for (Piece piece : chunks(segment(args.count, n, mod(r - s - 1, n)), chunk_elems)) items.push_back({true, s, piece});
  }
  for (int s = 0; s < n - 1; ++s) {
    for (Piece piece : chunks(segment(args.count, n, mod(r - s, n)), chunk_elems)) items.push_back({false, s, piece});
  }
  auto* slots = static_cast<uint8_t*>(exec.scratch().get(kDepth * chunk_elems * es));
  auto slot = [&](size_t i) { return slots + (i % kDepth) * chunk_elems * es; };

  std::vector<size_t> recv_ids(items.size());
  size_t posted = 0;
  auto post_up_to = [&](size_t limit) {
    for (; posted < items.size() && posted < limit; ++posted) {
      const RecvItem& item = items[posted];
      void* into = item.reduce ? slot(posted) : dst + item.piece.offset * es;
      recv_ids[posted] = exec.irecv(left, into, item.piece.count * es);
    }
  };

  post_up_to(kDepth);
  for (Piece piece : chunks(segment(args.count, n, r), chunk_elems)) {
    exec.isend(right, src + piece.offset * es, piece.count * es);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const RecvItem& item = items[i];
    exec.wait(recv_ids[i]);
    uint8_t* at = dst + item.piece.offset * es;
    if (item.reduce) {
      kernel(at, src + item.piece.offset * es, slot(i), item.piece.count);
      if (item.step == n - 2 && args.op == ReduceOp::kAvg) reduce::divide(at, at, item.piece.count, args.dtype, n);
    }
    // Slot i % kDepth is free again: keep kDepth reduce-scatter receives in flight (all-gather ones need none).
    post_up_to(i + 1 + kDepth);
    if (item.reduce || item.step < n - 2) exec.isend(right, at, item.piece.count * es);
  }
  exec.wait_all();
}

}  // namespace tbcoll::algo
