// What the tcp data listener lets in while it waits for its peers: anyone who reaches the port can open
// connections by the thousand (and never speak, or speak garbage). At most kMaxUnproven are held before their
// handshake; at the cap, one that sent nothing for kEvictSilentAfter makes room (a peer sends its hello as soon as
// it connected), else the oldest once it waited kEvictAfter, else no more are accepted for now (they wait in the
// kernel's backlog). Warnings about them are rate-limited (kLogBurst per kLogWindow, then one line counting the
// rest), and a rank that reaches its deadline says how many came (describe()). As the store's server does.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "common/time.h"

namespace tbcoll::tcp {

class Admission {
 public:
  static constexpr size_t kMaxUnproven = 128;
  static constexpr auto kEvictSilentAfter = std::chrono::milliseconds(100);
  static constexpr auto kEvictAfter = std::chrono::seconds(1);
  static constexpr int kLogBurst = 5;
  static constexpr auto kLogWindow = std::chrono::seconds(10);

  explicit Admission(int rank) : rank_(rank) {}
  ~Admission() { flush(); }

  /// A warning about a connection that is not a peer's: the first kLogBurst of a window are written.
  void warn(const std::string& message) {
    const auto now = Clock::now();
    if (now - window_start_ >= kLogWindow) {
      flush();
      window_start_ = now;
    }
    if (logged_ < kLogBurst) {
      ++logged_;
      log::warn("{}", message);
    } else {
      ++suppressed_;
    }
  }
  void dropped() { ++dropped_; }    ///< closed before a complete handshake: silent, too slow, or evicted
  void rejected() { ++rejected_; }  ///< its handshake was not a peer's

  /// Which of `pending` (each with `accepted` and `in`) to drop for room: -1 below the cap; -2 when none may go
  /// yet (accept no more for now).
  template <class Pending>
  int victim(const std::vector<Pending>& pending, Clock::time_point now) const {
    if (pending.size() < kMaxUnproven) return -1;
    int oldest = -2;
    for (size_t i = 0; i < pending.size(); ++i) {
      const auto age = now - pending[i].accepted;
      if (pending[i].in.empty() && age >= kEvictSilentAfter) return static_cast<int>(i);
      if (age >= kEvictAfter && (oldest < 0 || pending[i].accepted < pending[static_cast<size_t>(oldest)].accepted)) {
        oldest = static_cast<int>(i);
      }
    }
    return oldest;
  }

  /// For the error at the deadline: the connections that came and were not peers ("" when none did).
  std::string describe() const {
    if (dropped_ + rejected_ == 0) return "";
    return fmt::format(" (meanwhile {} other connection(s) reached this rank's listener: {} closed without a "
                       "handshake, {} rejected; a flood of connections from elsewhere, or ranks of another job)",
                       dropped_ + rejected_, dropped_, rejected_);
  }

 private:
  void flush() {
    if (suppressed_ > 0) {
      log::warn("[tcp] rank {}: {} more connection(s) dropped or rejected (at most {} warnings per {} s)", rank_,
                suppressed_, kLogBurst, kLogWindow.count());
    }
    suppressed_ = 0;
    logged_ = 0;
  }

  int rank_;
  Clock::time_point window_start_ = Clock::now();
  int logged_ = 0;
  uint64_t suppressed_ = 0;
  uint64_t dropped_ = 0;
  uint64_t rejected_ = 0;
};

}  // namespace tbcoll::tcp
