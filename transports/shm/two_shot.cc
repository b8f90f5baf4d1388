// The shm fast path's two-shot all-reduce through staging buffers in the segment (schedule in fast_path.h).
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "algorithms/chunking.h"
#include "common/copy.h"
#include "common/dtype.h"
#include "reduce/reduce.h"
#include "transports/shm/fast_path.h"

namespace tbcoll::shm {
namespace {

// Elements [lo, hi) of a round of `elems` elements that rank p reduces: equal parts, each a whole number of
// cache lines (elem_size divides 64), the last ones shorter or empty.
struct Slice {
  size_t lo;
  size_t hi;
};

constexpr size_t kStreamFromBytes = 16 << 20;

Slice slice_of(int p, size_t elems, int ranks, size_t elem_size) {
  const algo::Piece piece = algo::aligned_segment(elems, ranks, p, 64 / elem_size);
  return {piece.offset, piece.offset + piece.count};
}

}  // namespace

size_t FastPath::two_shot_slice_bytes() const {
  return std::min(kMaxSliceBytes, kStageBytes / static_cast<size_t>(size_) / 64 * 64);
}

void FastPath::wait_two_shot_inputs(uint64_t g, const transport::Tag& tag, size_t bytes, const Wait& wait) {
  for (int step = 1; step < size_; ++step) {
    const int p = (rank_ + step) % size_;
    TwoShotControl& theirs = areas_[p]->two_shot;
    wait_for(theirs.input, g, &theirs.sleepers, p, wait, "its two-shot input");
    const uint64_t meta = theirs.meta[g & 1], got = theirs.bytes[g & 1];
    if (meta != tag.meta || got != bytes) {
      throw MismatchError(fmt::format("[shm] rank {}: two-shot input of peer {} does not match: expected meta {:#x} "
                                      "{} B, got meta {:#x} {} B", rank_, p, tag.meta, bytes, meta, got),
                          p, tag.meta, meta, bytes, got);
    }
  }
}

void FastPath::all_reduce_two_shot(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                                   transport::Tag tag, Deadline deadline, std::chrono::microseconds spin) {
  const size_t es = element_size(dtype);
  const size_t bytes = count * es;
  const size_t slice_bytes = two_shot_slice_bytes();
  if (slice_bytes < 64) {
    throw InvalidArgument(fmt::format("[shm] two-shot all_reduce supports at most {} ranks", kStageBytes / 64));
  }
  const size_t round_elems = slice_bytes / es * static_cast<size_t>(size_);
  const Wait wait{deadline, spin, &tag};
  announce(tag, kTwoShot);
  const reduce::Kernel kernel = reduce::kernel(dtype, op);
  const auto* in = static_cast<const uint8_t*>(send);
  auto* out = static_cast<uint8_t*>(recv);
  TwoShotControl& mine = areas_[rank_]->two_shot;
  // Out of place and far beyond the caches, recv is written with non-temporal stores (no read for ownership:
  // a third less DRAM traffic). In place, recv's lines were just read and are still cached: plain stores.
  const bool streaming = send != recv && bytes >= kStreamFromBytes;
  auto copy_out = [&](void* dst, const void* src, size_t n) {
    if (streaming) stream_copy(dst, src, n);
    else std::memcpy(dst, src, n);
  };

  // B: copy the peers' reduced slices of round g (elements [base, base + elems)) into recv.
  auto gather = [&](uint64_t g, size_t base, size_t elems) {
    for (int step = 1; step < size_; ++step) {
      const int p = (rank_ + step) % size_;  // stagger, so ranks don't all read rank 0 first
      TwoShotControl& theirs = areas_[p]->two_shot;
      wait_for(theirs.reduced, g, &theirs.sleepers, p, wait, "its reduced two-shot slice");
      const Slice s = slice_of(p, elems, size_, es);
      copy_out(out + (base + s.lo) * es, areas_[p]->result[g & 1], (s.hi - s.lo) * es);
    }
  };

  uint64_t previous = 0;
  size_t previous_base = 0, previous_elems = 0;
  for (size_t base = 0; base < count; base += round_elems) {
    const size_t elems = std::min(round_elems, count - base);
    const uint64_t g = ++two_shot_rounds_;
    const int b = static_cast<int>(g & 1);
    // A: stage the slices the peers reduce.
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      const Slice s = slice_of(p, elems, size_, es);
      std::memcpy(areas_[rank_]->stage[b] + static_cast<size_t>(p) * slice_bytes, in + (base + s.lo) * es,
                  (s.hi - s.lo) * es);
    }
    mine.meta[b] = tag.meta;
    mine.bytes[b] = bytes;
    publish(mine.input, g, mine.sleepers);
    if (previous != 0) gather(previous, previous_base, previous_elems);
    // C: reduce my slice of every rank's input, in rank order, into result[b]; then into recv.
    wait_two_shot_inputs(g, tag, bytes, wait);
    const Slice s = slice_of(rank_, elems, size_, es);
    const size_t n = s.hi - s.lo;
    uint8_t* result = areas_[rank_]->result[b];
    auto input = [&](int p) -> const uint8_t* {
      return p == rank_ ? in + (base + s.lo) * es : areas_[p]->stage[b] + static_cast<size_t>(rank_) * slice_bytes;
    };
    if (n > 0) {
      reduce::reduce_ranks(result, size_, n, dtype, op, kernel, input);
      copy_out(out + (base + s.lo) * es, result, n * es);
    }
    publish(mine.reduced, g, mine.sleepers);
    previous = g;
    previous_base = base;
    previous_elems = elems;
  }
  if (previous != 0) gather(previous, previous_base, previous_elems);
}

}  // namespace tbcoll::shm
