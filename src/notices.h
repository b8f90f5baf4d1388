// Notices: how a rank tells its peers that it will not take part in a call, so they fail at once with its
// reason instead of waiting out the deadline.
//   refused  the rank refused its arguments for collective call k (valid on other ranks, perhaps: an MPI-style
//            in-place layout that only rank 0's addresses satisfy). The call's number is used up on that rank,
//            so ranks that all refused stay in step, and ranks that did not are told.
//   broken   the rank's communicator broke; it takes part in no collective from call k on (nor in send/recv).
//   timed out  broken by a wait past the deadline in call k (a peer stopped, or its host vanished); the reason is
//            the wait's ("timed out waiting for peer P ..."). Peers that timed out in that call too are no
//            explanation of each other (they all waited, maybe for the same rank): each keeps its own reason,
//            which names the peer it waited for, and adds theirs as context.
// Through the store (no transport knows of them): record n at "<prefix>/notice/<n>", counted by
// "<prefix>/notices". Waiting ranks look (check) at most every kInterval and only once their wait blocks, so a
// call that completes in time never asks the store. A store whose host vanished (a half-open connection: no reset,
// no close) answers nothing and says nothing: each look then waits out its budget, so a waiting call's look takes
// at most kLookBudget (its peers' data, if it comes meanwhile, waits no longer) and never runs past the call's
// deadline; a store silent for kBudget in all is not asked again; a call that timed out tells within kLateBudget.
// Threads: publish and check are called by the thread that runs the communicator's calls (one at a time).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tbcoll/store.hpp"

namespace tbcoll {

class Notices {
 public:
  enum class Kind : char { kRefused = 'R', kBroken = 'B', kTimedOut = 'T' };
  static constexpr std::chrono::milliseconds kInterval{20};
  /// How long one exchange with the store may take; a store silent that long (over one or several looks) is not
  /// asked again...
  static constexpr std::chrono::milliseconds kBudget{1000};
  /// ... one look of a waiting call (the store answers in a round trip; data may arrive meanwhile) ...
  static constexpr std::chrono::milliseconds kLookBudget{100};
  /// ... and after a call's deadline passed: the peers, in the same call, are about to time out themselves.
  static constexpr std::chrono::milliseconds kLateBudget{200};
  /// ... and for the reason of a peer that closed its connections as it failed (await_reason).
  static constexpr std::chrono::milliseconds kReasonWait{200};

  /// Without a store (a communicator of one rank) publish and check do nothing.
  void attach(std::shared_ptr<Store> store, std::string prefix, int rank);
  /// Tells the peers; bounded (by budget) and best effort: a store that is gone (rank 0 died, say) is logged only.
  void publish(Kind kind, uint64_t call, const std::string& reason,
               std::chrono::milliseconds budget = kBudget) noexcept;
  /// Throws RemoteError "peer P refused this call: <its reason>" or "peer P failed: <its reason>" when a peer
  /// refused collective call `call` or broke at or before it (collective false: send/recv, which only a broken
  /// peer concerns). Asks the store at most every kInterval, for up to kLookBudget and never past `until` (the
  /// waiting call's deadline).
  void check(uint64_t call, bool collective, Deadline until) {
    check(call, collective, false, std::min(until, Clock::now() + kLookBudget));
  }
  /// check() that asks the store now whatever the interval, for up to budget: for a call that failed on its own
  /// (a peer's connection closed, say), to tell why the peer went.
  void check_now(uint64_t call, bool collective, std::chrono::milliseconds budget = kBudget) {
    check(call, collective, true, Clock::now() + budget);
  }
  /// check_now() for a call that failed because a peer closed its connections: a peer that gave up closes them
  /// as it fails and tells why just after, so the store is asked again every few milliseconds for up to budget
  /// (a peer that died tells nothing: the call's own error stands then). A peer that broke in a later call counts
  /// too: it had finished its part of this one and moved on, and the connection it closed (a reset drops the
  /// bytes it sent that were not read yet) is what failed this call.
  void await_reason(uint64_t call, bool collective, std::chrono::milliseconds budget = kReasonWait);
  /// check_now() for a rank whose own call `call` timed out: throws as check_now() does, except for peers that
  /// timed out in that call too, which it returns as context instead: "peer P too: <its reason>; ..."
  /// ("" for none). Asks the store every few milliseconds until a peer's notice concerns the call or budget
  /// passed: the peers time out within the skew of their arrivals, some just after this rank.
  std::string check_after_timeout(uint64_t call, bool collective, std::chrono::milliseconds budget);
  /// "peer P refused this call: <its reason>" if a peer refused collective call `call` (asking the store now),
  /// else "". A peer that refused a call went on to the next: its messages mismatch the call's.
  std::string refusal_of(uint64_t call);

 private:
  struct Record {
    Kind kind;
    uint64_t call;
    int rank;
    std::string reason;
  };
  void check(uint64_t call, bool collective, bool now, Deadline until);
  void fetch(bool now, Deadline until);
  /// Asks the store now and then every few milliseconds until done() (which may throw) says so, the store is gone,
  /// or budget passed.
  template <typename Done>
  void poll(std::chrono::milliseconds budget, Done&& done);
  /// Throws for the first record that concerns call `call` (see check()), passing over the peers' timeouts in
  /// that very call when except_timeouts_in_call.
  void throw_if_told(uint64_t call, bool collective, bool except_timeouts_in_call, bool later_calls = false) const;

  std::shared_ptr<Store> store_;
  std::string prefix_;
  std::string count_key_;  ///< "<prefix>/notices", made once: a waiting call's look allocates nothing of its own
  int rank_ = -1;
  int64_t seen_ = 0;
  std::vector<Record> records_;
  Clock::time_point next_fetch_{};
  Clock::time_point silent_since_ = Clock::time_point::max();  ///< the first look of a silence that goes on
  std::atomic<bool> store_failed_{false};  ///< publish() may run on another thread (Communicator::abort)
};

/// Parses "<kind> <call> <rank> <reason>"; false when malformed.
bool parse_notice(const std::string& text, char* kind, uint64_t* call, int* rank, std::string* reason);

}  // namespace tbcoll
