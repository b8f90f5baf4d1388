// Whether a rank takes the lines of its next flagged call exclusive (prefetchw) as a call ends, learnt from the
// calls themselves. Taking them early moves the invalidation of the peer's copy (it read those lines two calls
// ago) off the next call's critical path, which wins where a hand-off between the two cores is slow; where it is
// fast, the peer already polls those lines and the prefetch only adds a bounce. Which one a machine has is not
// fixed (a VM's two vCPUs may sit on neighbouring or distant cores, from one run to the next), so the first
// 2 * kWindow calls of every kPeriod alternate, odd calls with and even ones without, timed (interleaved, so a
// warm-up or a change of load weighs on both alike), and the rest of the period takes the faster. The schedule
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
  /// The time call k took; at the end of the period's second window, decides.
  void record(uint64_t k, Clock::duration spent) {
    spent_[prefetched(k) ? 1 : 0] += spent;
    if (k % kPeriod == 2 * kWindow - 1) {
      chosen_ = spent_[1] < spent_[0];
      spent_[0] = spent_[1] = Clock::duration::zero();
    }
  }

 private:
  bool chosen_ = true;
  Clock::duration spent_[2]{};  // in this period's windows: without, with
};

}  // namespace tbcoll::shm
