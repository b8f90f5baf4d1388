// Ring all-reduce: reduce-scatter then all-gather around the ring r -> r+1, chunked and pipelined.
//
//   count split into n segments S0..S(n-1); each segment into K chunks (K from TBCOLL_CHUNK_BYTES, grown for large
//   messages: ring_chunk_bytes); chunk c of
//   every segment makes its own trip round the ring, 2(n-1) steps s = 0 .. 2n-3:
//   reduce-scatter, s < n-1:  send chunk c of S(r-s) to r+1, receive chunk c of S(r-s-1) from r-1,
//                             dst = src op received
//   all-gather, s >= n-1:     send chunk c of S(r+1-s') to r+1, receive the final S(r-s') from r-1 straight into
//                             dst (s' = s - (n-1))
//
//       r0 --S0--> r1 --S1--> r2 --S2--> r0        (step 0 of reduce-scatter, n = 3)
//
// Cost: 2(n-1) steps, each rank sends and receives 2(n-1)/n * bytes; (n-1)/n * bytes of reduction.
// Order of messages: every rank sends in the same order of (step, chunk), and so receives in it. It sends its own
// chunks (step 0) 4 ahead, then, for each message it receives but that of the last step, that message forwarded
// (reduced first in the reduce-scatter) followed by its next own chunk while any are left:
//   (0,0) (0,1) (0,2) (0,3) | (1,0) (0,4) | (1,1) (0,5) | (1,2) (0,6) | (1,3) (0,7) | (2,0) (0,8) | ...
// so a reduced chunk leaves while it is still in cache, and raw and reduced chunks share the link from the start
// (sending every own chunk first would queue the reduced ones behind S/2 of raw ones, out of the cache by the time
// they leave). A message and the one it forwards are a window of messages apart, so the steps' latencies overlap
// as in a plain pipeline (ordering chunk by chunk instead, all 2(n-1) steps of chunk c before chunk c+1, would
// chain them).
// Matching is FIFO per peer. Chunks to be reduced land in a few scratch slots, freed in order. Each segment is
// reduced once, by a fixed chain of ranks, and then copied around, so every rank ends with bitwise identical
// results. Avg divides once, at the owner.
// ring_all_reduce runs the same schedule over a subset of the ranks (the hierarchical schedule's leaders).
#include <algorithm>
#include <array>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/chunking.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"
#include "reduce/reduce.h"

namespace tbcoll::algo {
namespace {

constexpr size_t kAhead = 4;  // own chunks sent before the first forwarded one

// A chunk is TBCOLL_CHUNK_BYTES, grown for a large message to a sixteenth of it, up to 1 MiB: where every message
// costs system calls (tcp), fewer and larger ones move more bytes per call while sixteen chunks still pipeline
// (2 ranks on tcp here: 16 MiB 12.1 -> 8.5 ms, 32 MiB 25.2 -> 16.5 ms with 1 MiB chunks). The same on every rank:
// it depends on the call's size alone.
size_t ring_chunk_bytes(size_t chunk_bytes, size_t message_bytes) {
  return std::max(chunk_bytes, std::min(message_bytes / 16, std::max(chunk_bytes, size_t{1} << 20)));
}

// One message of the order below, as this rank receives it: its step and chunk, the elements it carries, and where
// its receive went.
struct Message {
  int step;
  size_t chunk;
  Piece piece;  // of recv; empty: neither sent nor received
  size_t slot = 0;
  size_t id = 0;
};

// The chunks of one ring of n ranks: K per segment, each at most chunk_elems; segments differ by one element at
// most, so chunk c of every segment is about the same size (empty ones are neither sent nor received, alike on
// both sides).
struct RingChunks {
  int n;
  size_t count;
  size_t k_chunks;
  size_t slot_elems;  // the largest chunk

  RingChunks(int ranks, size_t elements, size_t chunk_elems) : n(ranks), count(elements) {
    const size_t most = segment(count, n, 0).count;
    k_chunks = std::max<size_t>(1, (most + chunk_elems - 1) / chunk_elems);
    slot_elems = (most + k_chunks - 1) / k_chunks;
  }
  Piece piece(int seg, size_t c) const {
    const Piece whole = segment(count, n, mod(seg, n));
    const Piece part = segment(whole.count, static_cast<int>(k_chunks), static_cast<int>(c));
    return Piece{whole.offset + part.offset, part.count};
  }
  // What rank r receives at step s: reduce-scatter S(r-s-1), all-gather S(r-s').
  Message message(int r, int step, size_t c) const {
    return Message{step, c, piece(step < n - 1 ? r - step - 1 : r - (step - (n - 1)), c)};
  }
};

// The order every rank sends in (see above), and so receives in: its own chunks kAhead ahead, then each received
// message's forward and the next own chunk.
std::vector<Message> ring_order(const RingChunks& chunks, int r) {
  const int steps = 2 * (chunks.n - 1);
  std::vector<Message> order;
  order.reserve(chunks.k_chunks * static_cast<size_t>(steps));
  size_t own = 0;
  for (; own < std::min(kAhead, chunks.k_chunks); ++own) order.push_back(chunks.message(r, 0, own));
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i].step == steps - 1) continue;  // the last step is not forwarded
    order.push_back(chunks.message(r, order[i].step + 1, order[i].chunk));
    if (own < chunks.k_chunks) order.push_back(chunks.message(r, 0, own++));
  }
  return order;
}

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
  const int steps = 2 * (n - 1);
  const size_t es = args.elem_size;
  const auto* src = static_cast<const uint8_t*>(args.send);
  auto* dst = static_cast<uint8_t*>(args.recv);
  const reduce::Kernel kernel = reduce::kernel(args.dtype, args.op);

  const RingChunks chunks(n, args.count, std::max<size_t>(1, ring_chunk_bytes(exec.chunk_bytes(), args.count * es) / es));
  const size_t k_chunks = chunks.k_chunks, slot_elems = chunks.slot_elems;
  std::vector<Message> order = ring_order(chunks, r);

  auto* slots = static_cast<uint8_t*>(exec.scratch().get(kRingSlots * slot_elems * es));
  std::array<size_t, kRingSlots> free_slots;
  size_t free_count = kRingSlots;
  for (size_t s = 0; s < kRingSlots; ++s) free_slots[s] = kRingSlots - 1 - s;
  size_t posted = 0;
  // Posts receives in order while slots last (they are consumed in the same order, so the one awaited always is).
  auto post = [&] {
    for (; posted < order.size(); ++posted) {
      Message& m = order[posted];
      if (m.piece.count == 0) continue;
      if (m.step < n - 1) {
        if (free_count == 0) return;
        m.slot = free_slots[--free_count];
        m.id = exec.irecv(left, slots + m.slot * slot_elems * es, m.piece.count * es);
      } else {
        m.id = exec.irecv(left, dst + m.piece.offset * es, m.piece.count * es);
      }
    }
  };
  size_t sent_own = 0;
  auto send_own = [&] {
    const Piece p = chunks.piece(r, sent_own++);
    if (p.count > 0) exec.isend(right, src + p.offset * es, p.count * es);
  };

  post();
  while (sent_own < std::min(kAhead, k_chunks)) send_own();
  for (size_t i = 0; i < order.size(); ++i) {
    const Message& m = order[i];
    const Piece p = m.piece;
    if (p.count > 0) {
      exec.wait(m.id);
      uint8_t* at = dst + p.offset * es;
      if (m.step < n - 1) {
        kernel(at, src + p.offset * es, slots + m.slot * slot_elems * es, p.count);
        if (m.step == n - 2 && args.op == ReduceOp::kAvg) reduce::divide(at, at, p.count, args.dtype, n);
        free_slots[free_count++] = m.slot;
        post();
      }
      if (m.step < steps - 1) exec.isend(right, at, p.count * es);
    }
    if (m.step < steps - 1 && sent_own < k_chunks) send_own();
  }
  exec.wait_all();
}

TBCOLL_ALGORITHM(all_reduce_ring) {
  Algorithm row;
  row.kind = OpKind::kAllReduce;
  row.name = "ring";
  row.description =
      "reduce-scatter then all-gather around the ring, chunked and pipelined: 2(n-1) steps, "
      "2(n-1)/n S sent per rank";
  row.run = all_reduce_ring;
  row.cost = cost_all_reduce_ring;
  row.position = 100;  // the last: it takes every size
  return row;
}

}  // namespace tbcoll::algo
