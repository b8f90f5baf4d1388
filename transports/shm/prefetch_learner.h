// Whether a rank takes the lines of its next flagged call exclusive (prefetchw) as a call ends, learnt from the
// calls themselves. Taking them early moves the invalidation of the peer's copy (it read those lines two calls
// ago) off the next call's critical path, which wins where a hand-off between the two cores is slow; where it is
// fast, the peer already polls those lines and the prefetch only adds a bounce. Which one a machine has is not
// fixed (a VM's two vCPUs may sit on neighbouring or distant cores, from one run to the next), so the first
// 2 * kWindow calls of every kPeriod alternate, odd calls with and even ones without, timed, and the rest of the
// period takes the way that was faster in most pairs of neighbouring calls (a vote: one slow call, the first of
// a job or one the OS interrupted, counts once, and a change of load weighs on both ways alike). The schedule
// follows the call number, the same on every rank, so the ranks try each way together.
#pragma once

#include <cstdint>

#include "tbcoll/deadline.hpp"

namespace tbcoll::shm {

class PrefetchLearner {
 public:
  static constexpr uint64_t kPeriod = 8192;
  static constexpr uint64_t kWindow = 256;

  /// Whether call k runs with its lines taken exclusive at the end of call k - 1.
  bool prefetched(uint64_t k) const {
    return timed(k) ? (k & 1) != 0 : chosen_;
  }
  /// Whether call k is timed (record() its time).
  static bool timed(uint64_t k) { return k % kPeriod < 2 * kWindow; }
  /// The time call k took; after the period's last timed call, decides and returns true.
  bool record(uint64_t k, Clock::duration spent) {
    const bool with = prefetched(k);
    spent_[with ? 1 : 0] += spent;
    if (!with) {
      without_ = spent;
      return false;
    }
    if (spent < without_) ++votes_with_;
    if (k % kPeriod != 2 * kWindow - 1) return false;
    chosen_ = votes_with_ > kWindow / 2;
    votes_with_ = 0;
    for (int way = 0; way < 2; ++way) {
      decided_by_[way] = spent_[way] / kWindow;
      spent_[way] = Clock::duration::zero();
    }
    return true;
  }
  bool chosen() const { return chosen_; }
  /// The mean time of a timed call without (false) and with (true), at the last decision.
  Clock::duration mean(bool with) const { return decided_by_[with ? 1 : 0]; }

 private:
  bool chosen_ = true;
  Clock::duration spent_[2]{};  // in this period's timed calls: without, with
  Clock::duration without_{};   // the last timed call without
  uint64_t votes_with_ = 0;     // pairs of this period's timed calls in which the one with was faster
  Clock::duration decided_by_[2]{};
};

}  // namespace tbcoll::shm
