// Rabenseifner's halving-doubling all-reduce: a reduce-scatter by recursive halving, then an all-gather by
// recursive doubling, both among p = 2^k (virtual) ranks; the data is cut into p segments.
//
//   reduce-scatter (n = 4, segments A B C D)      all-gather (the same pairs, backwards)
//   round 0: 0 <-> 2   1 <-> 3                    round 0: 0 <-> 1   2 <-> 3    swap 1 segment
//            0,1 keep A B, send C D;              round 1: 0 <-> 2   1 <-> 3    swap 2 segments
//            2,3 keep C D, send A B
//   round 1: 0 <-> 1   2 <-> 3                    every rank ends with A B C D
//            rank v keeps segment v
//
// A non-power-of-two world is folded as in recursive doubling (topology.h, Fold): rank 2i hands its input to
// 2i+1 (i < extra) before, and receives the result after.
//
// Cost: 2 log2 p rounds (+ 2 when n is not a power of two); each rank sends and receives 2(p-1)/p S (plus S
// twice across a fold) and reduces (p-1)/p S: the ring's bandwidth with log latency. Each segment is reduced
// once, by its owner, along a fixed tree (avg divided there), then copied: bitwise identical on every rank.
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/chunking.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"
#include "algorithms/topology.h"
#include "reduce/reduce.h"

namespace tbcoll::algo {

void all_reduce_halving_doubling(Exec& exec, const Args& args) {
  const int r = exec.rank();
  const Fold fold(exec.size());
  const size_t es = args.elem_size;
  const size_t bytes = args.count * es;
  const auto* src = static_cast<const uint8_t*>(args.send);
  auto* dst = static_cast<uint8_t*>(args.recv);
  const reduce::Kernel kernel = reduce::kernel(args.dtype, args.op);
  auto* other = static_cast<uint8_t*>(exec.scratch().get(bytes));

  if (r < 2 * fold.extra && r % 2 == 0) {  // folded out
    exec.isend(r + 1, src, bytes);
    exec.wait(exec.irecv(r + 1, dst, bytes));
    exec.wait_all();
    return;
  }
  if (r < 2 * fold.extra) {
    exec.wait(exec.irecv(r - 1, other, bytes));
    kernel(dst, other, src, args.count);
  } else if (dst != src) {
    std::memcpy(dst, src, bytes);
  }
  const int v = fold.virtual_rank(r);
  // Segments [lo, hi) of p as elements.
  auto span = [&](int lo, int hi) {
    const Piece first = segment(args.count, fold.p, lo);
    const Piece last = segment(args.count, fold.p, hi - 1);
    return Piece{first.offset, last.offset + last.count - first.offset};
  };

  int lo = 0, hi = fold.p;
  for (int mask = fold.p / 2; mask >= 1; mask >>= 1) {  // reduce-scatter by halving
    const int partner = v ^ mask;
    const int peer = fold.real_rank(partner);
    const int mid = lo + mask;
    const bool lower = (v & mask) == 0;
    const Piece keep = lower ? span(lo, mid) : span(mid, hi);
    const Piece give = lower ? span(mid, hi) : span(lo, mid);
    const size_t got = exec.irecv(peer, other, keep.count * es);
    const size_t sent = exec.isend(peer, dst + give.offset * es, give.count * es);
    exec.wait(got);
    uint8_t* mine = dst + keep.offset * es;
    if (partner < v) {
      kernel(mine, other, mine, keep.count);
    } else {
      kernel(mine, mine, other, keep.count);
    }
    exec.wait(sent);  // the next round's receive reuses `other`; give is overwritten by the all-gather
    if (lower) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  const Piece owned = span(lo, hi);  // segment v
  if (args.op == ReduceOp::kAvg) {
    reduce::divide(dst + owned.offset * es, dst + owned.offset * es, owned.count, args.dtype, exec.size());
  }
  for (int mask = 1; mask < fold.p; mask <<= 1) {  // all-gather by doubling
    const int partner = v ^ mask;
    const int peer = fold.real_rank(partner);
    const bool lower = (v & mask) == 0;
    const Piece mine = span(lo, hi);
    const Piece theirs = lower ? span(hi, hi + mask) : span(lo - mask, lo);
    const size_t got = exec.irecv(peer, dst + theirs.offset * es, theirs.count * es);
    exec.isend(peer, dst + mine.offset * es, mine.count * es);
    exec.wait(got);
    if (lower) {
      hi += mask;
    } else {
      lo -= mask;
    }
  }
  if (r < 2 * fold.extra) exec.isend(r - 1, dst, bytes);
  exec.wait_all();
}

TBCOLL_ALGORITHM(all_reduce_halving_doubling) {
  Algorithm row;
  row.kind = OpKind::kAllReduce;
  row.name = "halving_doubling";
  row.description =
      "Rabenseifner: reduce-scatter by recursive halving, all-gather by recursive doubling "
      "(non-powers of two folded): 2 log2 n steps (+2), 2(n-1)/n S sent per rank";
  row.run = all_reduce_halving_doubling;
  row.cost = cost_all_reduce_halving_doubling;
  row.position = 40;
  row.auto_range = by_model;
  return row;
}

}  // namespace tbcoll::algo
