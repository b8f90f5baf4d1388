// The shm one-shot calls for the smallest inputs, through flagged lines (layout in segment.h).
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/dtype.h"
#include "common/log.h"
#include "transports/shm/fast_path.h"

namespace tbcoll::shm {
namespace {

// A line's payload: whole lines with a constant size the compiler inlines (a call to memcpy per 56 bytes
// costs as much as the copy), the rest through memcpy.
inline void copy_small(void* dst, const void* src, size_t n) {
  if (n == kLineBytes) {
    std::memcpy(dst, src, kLineBytes);
  } else if (n == kLineBytes - 8) {
    std::memcpy(dst, src, kLineBytes - 8);
  } else {
    std::memcpy(dst, src, n);
  }
}

// Calls of up to this many lines take the next call's lines exclusive where the learner says so: a peer already
// polling all of them would pull each back shared, and many such round trips cost more than they save.
constexpr size_t kPrefetchLines = 8;

size_t flagged_lines(size_t bytes) { return (bytes + 8 + kLineBytes - 1) / kLineBytes; }

}  // namespace

uint64_t FastPath::exchange_flagged(const void* send, size_t bytes, const transport::Tag& tag, const Wait& wait) {
  announce(tag, kOneShot);
  const uint64_t k = ++calls_;  // shared with the slots: the reuse argument of exchange_slots holds for both
  const int b = static_cast<int>(k & 1);
  const size_t lines = flagged_lines(bytes);
  FlaggedSlot& mine = areas_[rank_]->flagged[b];
  const auto* in = static_cast<const uint8_t*>(send);
  size_t left = bytes;
  for (size_t i = 0; i < lines; ++i) {
    FlaggedLine& line = mine.lines[i];
    const size_t skip = i == 0 ? 8 : 0;
    if (i == 0) std::memcpy(line.payload, &tag.meta, 8);
    const size_t n = std::min(left, kLineBytes - skip);
    copy_small(line.payload + skip, in, n);
    in += n;
    left -= n;
    // Release orders the payload before the flag. The last flag is sequentially consistent, so the check of
    // sleepers below cannot pass it (a reader announces itself in sleepers, then re-reads this flag), and
    // waiting for its ownership drains our stores before we poll the peer's lines (else the peer, polling,
    // pulls lines back that we are still writing): even for one line that saves more than the fence costs.
    line.flag.store(k, i + 1 < lines ? std::memory_order_release : std::memory_order_seq_cst);
  }
  if (areas_[rank_]->flagged_sleepers.load(std::memory_order_seq_cst) != 0) {
    wake_sleepers(&mine.lines[lines - 1].flag);
  }

  for (int step = 1; step < size_; ++step) {
    const int p = (rank_ + step) % size_;
    const FlaggedSlot& theirs = areas_[p]->flagged[b];
    // Poll every line at once (the loads overlap); a peer in another call is spotted by the signature in
    // line 0. After a short spin, fall back to the general wait on the last line, whose flag is stored last.
    bool ready = false;
    for (int spin = 0; spin < 4096 && !ready; ++spin) {
      bool all = true;
      for (size_t i = 0; i < lines; ++i) all &= theirs.lines[i].flag.load(std::memory_order_acquire) >= k;
      ready = all;
      if (!ready && theirs.lines[0].flag.load(std::memory_order_acquire) >= k) check_flagged_meta(p, theirs, tag);
    }
    if (!ready) wait_for(theirs.lines[lines - 1].flag, k, &areas_[p]->flagged_sleepers, p, wait, "its one-shot input");
    check_flagged_meta(p, theirs, tag);
  }
  return k;
}

void FastPath::check_flagged_meta(int peer, const FlaggedSlot& theirs, const transport::Tag& tag) {
  uint64_t meta;
  std::memcpy(&meta, theirs.lines[0].payload, 8);
  if (meta != tag.meta) {
    throw MismatchError(fmt::format("[shm] rank {}: one-shot input of peer {} does not match: expected meta {:#x}, "
                                    "got meta {:#x}", rank_, peer, tag.meta, meta),
                        peer, tag.meta, meta, 0, 0);
  }
}

void FastPath::read_flagged(int peer, uint64_t k, void* out, size_t bytes) {
  const FlaggedSlot& theirs = areas_[peer]->flagged[k & 1];
  auto* at = static_cast<uint8_t*>(out);
  size_t left = bytes;
  for (size_t i = 0; left > 0; ++i) {
    const size_t skip = i == 0 ? 8 : 0;
    const size_t n = std::min(left, kLineBytes - skip);
    copy_small(at, theirs.lines[i].payload + skip, n);
    at += n;
    left -= n;
  }
}

void FastPath::all_reduce_flagged(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                                  const transport::Tag& tag, const Wait& wait) {
  const size_t bytes = count * element_size(dtype);
  start_flagged(calls_ + 1);
  const uint64_t k = exchange_flagged(send, bytes, tag, wait);
  const bool one_line = bytes <= kLineBytes - 8;
  if (size_ == 2 && one_line) {  // the common case of tensor parallelism, with no table of inputs
    const uint8_t* theirs = areas_[1 - rank_]->flagged[k & 1].lines[0].payload + 8;
    kernel_for(dtype, op)(recv, rank_ == 0 ? send : theirs, rank_ == 0 ? theirs : send, count);
    if (op == ReduceOp::kAvg) reduce::divide(recv, recv, count, dtype, 2);
    end_flagged(k, 1);
    return;
  }
  // Inputs in rank order. A peer's input that fits its first line is read where it is (the peer writes this slot
  // again only after it saw our next call's flags, so it stays until we are done); longer ones are unpacked into
  // scratch. Mine comes straight from send, except in place on ranks >= 2, whose recv is overwritten by the first
  // reduction before their own input is used.
  if (!one_line || (send == recv && rank_ >= 2)) scratch_.resize(static_cast<size_t>(size_) * kFlaggedMaxBytes);
  std::vector<const uint8_t*>& inputs = inputs_;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && one_line) {
      inputs[p] = areas_[p]->flagged[k & 1].lines[0].payload + 8;
      continue;
    }
    uint8_t* unpacked = scratch_.data() + static_cast<size_t>(p) * kFlaggedMaxBytes;
    if (p != rank_) {
      read_flagged(p, k, unpacked, bytes);
      inputs[p] = unpacked;
    } else if (send == recv && rank_ >= 2) {
      std::memcpy(unpacked, send, bytes);
      inputs[p] = unpacked;
    } else {
      inputs[p] = static_cast<const uint8_t*>(send);
    }
  }
  reduce::reduce_ranks(recv, size_, count, dtype, op, kernel_for(dtype, op), [&](int p) { return inputs[p]; });
  end_flagged(k, flagged_lines(bytes));
}

void FastPath::all_gather_flagged(const void* send, void* recv, size_t bytes_per_rank, const transport::Tag& tag,
                                  const Wait& wait) {
  start_flagged(calls_ + 1);
  const uint64_t k = exchange_flagged(send, bytes_per_rank, tag, wait);
  auto* out = static_cast<uint8_t*>(recv);
  uint8_t* own = out + static_cast<size_t>(rank_) * bytes_per_rank;
  if (own != send) std::memcpy(own, send, bytes_per_rank);
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) read_flagged(p, k, out + static_cast<size_t>(p) * bytes_per_rank, bytes_per_rank);
  }
  end_flagged(k, flagged_lines(bytes_per_rank));
}

void FastPath::log_prefetch_choice() const {
  using std::chrono::nanoseconds;
  log::trace("[shm] rank {}: flagged calls {} the next call's lines exclusive ({} ns per call with, {} without)",
             rank_, prefetch_.chosen() ? "take" : "do not take",
             std::chrono::duration_cast<nanoseconds>(prefetch_.mean(true)).count(),
             std::chrono::duration_cast<nanoseconds>(prefetch_.mean(false)).count());
}

void FastPath::end_flagged(uint64_t k, size_t lines) {
  // Safe: every peer finished reading the next call's lines (those of call k - 1) before publishing the input
  // of call k that we just consumed; prefetchw changes their cache state, not their data.
  if (lines <= kPrefetchLines && prefetch_.prefetched(k + 1)) {
    take_exclusive(&areas_[rank_]->flagged[(k + 1) & 1], lines * sizeof(FlaggedLine));
  }
}

}  // namespace tbcoll::shm
