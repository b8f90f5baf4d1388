// Whether a rank takes the lines of its next flagged call exclusive (prefetchw) as a call ends, learnt from the
// calls themselves. Taking them early moves the invalidation of the peer's copy (it read those lines two calls
// ago) off the next call's critical path, which wins where a hand-off between the two cores is slow; where it is
// fast, the peer may already poll those lines and the prefetch can add a bounce. Which one a machine has is not
// fixed (a VM's two vCPUs may sit on neighbouring or distant cores, from one minute to the next), so the first
// kBlocks blocks of kBlock call numbers of every kPeriod run alternately without and with, timed, and the rest of
// the period takes the way that was faster in most pairs of neighbouring blocks (a vote: one slow call, the first
// of a job or one the OS interrupted, costs its block one pair, and a change of load weighs on both ways alike).
//
// What is timed is a block's wall time, the clock read once at the first call of each block: per call number,
// the rate at which the ranks get through calls, gaps between calls included. Timing each call on its own would
// measure something else: the ranks run in lock step, so what one call costs shows up in the peer's next wait as
// much as in its own time, calls that alternate one by one credit each way with the other's effect (the ranks
// learn opposite ways and flip every period), and two clock reads per call change the timing they measure.
// The schedule follows the call number, the same on every rank, so the ranks try each way together and, timing
// the same blocks, choose alike.
#pragma once

#include <cstdint>

#include "tbcoll/deadline.hpp"

namespace tbcoll::shm {

class PrefetchLearner {
 public:
  // Half of the timed calls run the slower way, so they are few and rare: 2048 of every 262144 calls (the first
  // decision comes after 2048 flagged calls; a machine whose cores moved is noticed within a period).
  static constexpr uint64_t kPeriod = uint64_t{1} << 18;
  // Blocks long enough for the ranks to settle into a way's rhythm: in blocks of 32 calls the prefetch's gain
  // (half the time per call on two vCPUs of one core) does not show at all; in blocks of 256 it does.
  static constexpr uint64_t kBlock = 256;  ///< call numbers timed together, all run one way
  static constexpr uint64_t kBlocks = 8;   ///< timed blocks at the start of a period: even ones without, odd with

  /// Whether call k runs with its lines taken exclusive at the end of call k - 1.
  bool prefetched(uint64_t k) const { return timed(k) ? (k / kBlock & 1) != 0 : chosen_; }
  /// Whether call k is in a timed block.
  static bool timed(uint64_t k) { return k % kPeriod < kBlock * kBlocks; }
  /// Whether call k must read the clock as it starts and pass it to start(): the first call of a timed block, or
  /// the first one after a timed block (which ends it). Calls of other kinds may take numbers in between.
  bool needs_clock(uint64_t k) const { return k / kBlock != block_ && (open_ || timed(k)); }
  /// Call k (needs_clock(k)) starts at `now`: ends the open block and opens the next if k is timed. True when
  /// that ended the period's last timed block and so decided.
  bool start(uint64_t k, Clock::time_point now) {
    const bool decided = open_ && close_block(k, now);
    block_ = k / kBlock;
    open_ = timed(k);
    opened_at_ = now;
    first_ = k;
    return decided;
  }
  bool chosen() const { return chosen_; }
  /// The mean time per call number without (false) and with (true) in the timed blocks of the last decision.
  Clock::duration mean(bool with) const { return decided_by_[with ? 1 : 0]; }

 private:
  // Ends the open block at call k, time now; after the period's last timed one, decides (true).
  bool close_block(uint64_t k, Clock::time_point now) {
    const int way = (block_ & 1) != 0 ? 1 : 0;
    const Clock::duration spent = now - opened_at_;
    const auto numbers = static_cast<int64_t>(k - first_);
    spent_[way] += spent;
    numbers_[way] += numbers;
    if (way == 0) {
      without_ = spent;
      without_numbers_ = numbers;
    } else if (without_numbers_ > 0) {  // per call number: a block may end early (calls of other kinds)
      ++pairs_;
      if (spent * without_numbers_ < without_ * numbers) ++votes_with_;
      without_numbers_ = 0;
    }
    // The period's last timed block (or the last that had a call): k is past the timed blocks of its period.
    if (timed(k) && k / kPeriod == block_ * kBlock / kPeriod) return false;
    for (int w = 0; w < 2; ++w) {
      decided_by_[w] = numbers_[w] > 0 ? spent_[w] / numbers_[w] : Clock::duration::zero();
      spent_[w] = Clock::duration::zero();
      numbers_[w] = 0;
    }
    // A tie of the votes goes to the lower mean.
    chosen_ = 2 * votes_with_ > pairs_ || (2 * votes_with_ == pairs_ && decided_by_[1] < decided_by_[0]);
    votes_with_ = pairs_ = 0;
    without_numbers_ = 0;
    return true;
  }

  bool chosen_ = true;
  bool open_ = false;                 // a timed block is running
  uint64_t block_ = ~uint64_t{0};     // the block of the last call that read the clock (call number / kBlock)
  Clock::time_point opened_at_{};     // when the open block's first call started
  uint64_t first_ = 0;                // its number
  Clock::duration without_{};         // the last block without, not yet paired
  int64_t without_numbers_ = 0;
  uint64_t pairs_ = 0;                // pairs of neighbouring blocks (without, with) this period
  uint64_t votes_with_ = 0;           // of which the block with was faster per call number
  Clock::duration spent_[2]{};        // this period's timed blocks: without, with
  int64_t numbers_[2]{};
  Clock::duration decided_by_[2]{};
};

}  // namespace tbcoll::shm
