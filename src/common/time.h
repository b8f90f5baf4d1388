// Deadlines: every blocking wait in tbcoll takes one.
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "tbcoll/error.hpp"
#include "platform/platform.h"
#include "tbcoll/deadline.hpp"

namespace tbcoll {

/// Now on the steady clock, read cheaply (platform::coarse_now: up to a scheduler tick behind on Linux). A
/// deadline is set on every collective call, where a precise read costs a noticeable share of a 0.2 us
/// all-reduce; a deadline a few milliseconds early does not matter.
inline Clock::time_point coarse_now() { return platform::coarse_now(); }

/// A timeout converted once, for deadlines set on every call: deadline() is coarse_now() plus it, without the
/// conversion from seconds (or never, for 1e9 s and more).
class CallTimeout {
 public:
  CallTimeout() = default;
  explicit CallTimeout(double seconds)
      : never_(!(seconds < 1e9)),
        duration_(never_ ? Clock::duration::zero()
                         : std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds))) {}
  Deadline deadline() const { return deadline_in(duration()); }
  /// The timeout itself; Clock::duration::max() for none.
  Clock::duration duration() const { return never_ ? Clock::duration::max() : duration_; }
  /// coarse_now() + timeout; Deadline::max() for Clock::duration::max() (none).
  static Deadline deadline_in(Clock::duration timeout) {
    return timeout == Clock::duration::max() ? Deadline::max() : coarse_now() + timeout;
  }

 private:
  bool never_ = false;
  Clock::duration duration_{std::chrono::seconds(60)};
};

/// A deadline `seconds` from now. 1e9 s (31 years) or more, infinity included, means never: the nanosecond count
/// of a larger timeout would overflow (into the past).
inline Deadline deadline_after(double seconds) { return CallTimeout(seconds).deadline(); }

/// Set-up waits another thread may cut short: a split's child set-up when the communicator being split is aborted.
/// Waits that take a `cancelled` flag look at it at least every kCancelPollMs. Null: nothing cancels.
constexpr int kCancelPollMs = 100;
inline void check_cancelled(const std::atomic<bool>* cancelled, const std::string& who) {
  if (cancelled != nullptr && cancelled->load(std::memory_order_acquire)) {
    throw InvalidUsage(who + ": set-up abandoned: the communicator was aborted");
  }
}

/// Milliseconds left until deadline (0 when passed), for poll() timeouts.
inline int remaining_ms(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : (left > 1000000 ? 1000000 : static_cast<int>(left));
}

}  // namespace tbcoll
