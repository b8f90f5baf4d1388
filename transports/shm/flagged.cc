// The shm one-shot calls for the smallest inputs, through flagged lines (layout in segment.h).
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/dtype.h"
#include "common/log.h"
#include "transports/shm/fast_path.h"

namespace tbcoll::shm {
namespace {

// A line's payload (up to 56 bytes): whole 8-byte words as constant-size copies the compiler inlines (a call to
// memcpy per line costs as much as the copy), the rest through memcpy.
inline void copy_small(void* dst, const void* src, size_t n) {
  auto* to = static_cast<uint8_t*>(dst);
  const auto* from = static_cast<const uint8_t*>(src);
  switch (n) {
    case 8: std::memcpy(to, from, 8); return;
    case 16: std::memcpy(to, from, 16); return;
    case 24: std::memcpy(to, from, 24); return;
    case 32: std::memcpy(to, from, 32); return;
    case 40: std::memcpy(to, from, 40); return;
    case 48: std::memcpy(to, from, 48); return;
    case 56: std::memcpy(to, from, 56); return;
    default: std::memcpy(to, from, n);
  }
}

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

FastPath::PairLine FastPath::pair_line(size_t count, DataType dtype, ReduceOp op) {
  const int peer = 1 - rank_;
  return {peer,  areas_[rank_], areas_[peer], queue_at(headers_[peer], rank_), kernel_for(dtype, op),
          count, count * element_size(dtype), dtype, op == ReduceOp::kAvg};
}

void FastPath::all_reduce_pair_line(const PairLine& plan, const void* send, void* recv, const transport::Tag& tag,
                                    const Wait& wait, const transport::CollectiveArgs* prepared) {
  check_unreceived(*plan.from_peer, rank_, plan.peer, tag);  // announce(tag, kOneShot) for the one peer
  publish_announcement(tag, kOneShot);
  const uint64_t k = ++calls_;
  start_flagged(k);
  // As exchange_flagged for one line: signature and input, then the flag (sequentially consistent: see there).
  FlaggedLine& line = plan.mine->flagged[k & 1].lines[0];
  std::memcpy(line.payload, &tag.meta, 8);
  copy_small(line.payload + 8, send, plan.bytes);
  line.flag.store(k, std::memory_order_seq_cst);
  if (plan.mine->flagged_sleepers.load(std::memory_order_seq_cst) != 0) wake_sleepers(&line.flag);
  const FlaggedSlot& slot = plan.theirs->flagged[k & 1];
  const FlaggedLine& theirs = slot.lines[0];
  for (int spin = 0; spin < 4096 && theirs.flag.load(std::memory_order_acquire) < k; ++spin) {}
  if (theirs.flag.load(std::memory_order_acquire) < k) {
    // The general wait; a prepared call's arguments and deadline are put in place for it only now.
    if (prepared == nullptr) {
      wait_for(theirs.flag, k, &plan.theirs->flagged_sleepers, plan.peer, wait, "its one-shot input");
    } else {
      with_call(*prepared, [&] {
        Wait timed = wait;
        timed.deadline = transport::call_deadline(*prepared);
        wait_for(theirs.flag, k, &plan.theirs->flagged_sleepers, plan.peer, timed, "its one-shot input");
      });
    }
  }
  uint64_t meta;
  std::memcpy(&meta, theirs.payload, 8);
  if (meta != tag.meta) check_flagged_meta(plan.peer, slot, tag);
  // Reduced where it lies: the peer writes this slot again only after it saw our next call's flag.
  const uint8_t* input = theirs.payload + 8;
  plan.kernel(recv, rank_ == 0 ? send : input, rank_ == 0 ? input : send, plan.count);
  if (plan.average) reduce::divide(recv, recv, plan.count, plan.dtype, 2);
  end_flagged(k, 1);
}

// A prepared 2-rank one-line all_reduce: the plan made once, the call's own arguments passed through.
class PreparedPairLine final : public transport::PreparedFastCall {
 public:
  PreparedPairLine(FastPath& fast_path, const FastPath::PairLine& plan) : fast_path_(fast_path), plan_(plan) {}
  void run(const transport::CollectiveArgs& args) override {
    // The deadline is left unread (Deadline::min()): all_reduce_pair_line reads it if its wait needs one.
    fast_path_.all_reduce_pair_line(plan_, args.send, args.recv, args.tag,
                                    FastPath::Wait{Deadline::min(), args.spin, &args.tag}, &args);
  }

 private:
  FastPath& fast_path_;
  const FastPath::PairLine plan_;
};

std::unique_ptr<transport::PreparedFastCall> FastPath::prepare(size_t index, const transport::CollectiveArgs& args) {
  const size_t bytes = args.count * element_size(args.dtype);
  if (kinds_[index] == Kind::kAllReduceOneShot && size_ == 2 && bytes > 0 && bytes <= kLineBytes - 8) {
    return std::make_unique<PreparedPairLine>(*this, pair_line(args.count, args.dtype, args.op));
  }
  return CollectiveFastPath::prepare(index, args);
}

void FastPath::all_reduce_flagged(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                                  const transport::Tag& tag, const Wait& wait) {
  const size_t bytes = count * element_size(dtype);
  const bool one_line = bytes <= kLineBytes - 8;
  if (size_ == 2 && one_line) {  // the common case of tensor parallelism, with no table of inputs
    all_reduce_pair_line(pair_line(count, dtype, op), send, recv, tag, wait);
    return;
  }
  start_flagged(calls_ + 1);
  const uint64_t k = exchange_flagged(send, bytes, tag, wait);
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

void FastPath::start_flagged_block(uint64_t k) {
  if (prefetch_.start(k, Clock::now())) log_prefetch_choice();
}

}  // namespace tbcoll::shm
