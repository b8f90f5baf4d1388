// Communicator internals shared by communicator.cc (set-up) and collectives.cc (the calls).
#pragma once

#include <array>
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "algorithms/exec.h"
#include "call_checks.h"
#include "collective_traits.h"
#include "common/time.h"
#include "async.h"
#include "flight/recorder.h"
#include "notices.h"
#include "p2p_async.h"
#include "setup/setup.h"
#include "signature.h"
#include "tbcoll/tbcoll.hpp"
#include "tbcoll/transport.hpp"
#include "tuner.h"
#include "tuner_measured.h"

namespace tbcoll {

/// The internals of a communicator, for the library's own code and its tests (a registered collective's calls).
struct CommunicatorAccess {
  static Communicator::Impl& impl(Communicator& comm) { return comm.impl(); }
};

/// Re-throws error with "what failed: " in front, keeping its type.
[[noreturn]] void rethrow_with_context(const Error& error, const std::string& what);

/// Whether a communicator broke, and why: set by any thread (abort, a failed call), read on every call.
class Health {
 public:
  bool broken() const { return broken_.load(std::memory_order_acquire); }
  /// The flag itself, for waits another thread's abort must cut short (a split's set-up).
  const std::atomic<bool>* flag() const { return &broken_; }
  /// Marks it broken; the first reason stays.
  void mark(const std::string& reason);
  std::string reason() const;

 private:
  std::atomic<bool> broken_{false};
  mutable std::mutex mutex_;
  std::string reason_;
};

/// The numbers a communicator's calls take, the same on every rank (collectives, splits), or per peer pair and
/// direction (send/recv); and the group being recorded (group_start .. group_end). The driving thread's.
struct CallCounters {
  uint64_t collective_seq = 0;
  uint64_t splits = 0;  ///< split() calls so far (collective, so equal on every rank)
  uint64_t since_settled = 0;  ///< calls since the deferred checks were last settled
  std::vector<uint64_t> p2p_sent, p2p_received;  ///< by peer
  struct GroupedP2p {
    bool is_send;
    void* buf;
    size_t bytes;
    int peer;
    transport::Tag tag;
  };
  int group_depth = 0;
  std::vector<GroupedP2p> group_ops;
};

struct TBCOLL_LOCAL Communicator::Impl {
  /// The set-up's results (setup/setup.h); the rest starts empty.
  Impl(const Config& config, int instance, setup::Rendezvous rendezvous, setup::Links links, Tuner tuner,
       std::string emulation);
  /// Settles the deferred checks (settle_at_exit); a broken communicator whose process serves the store stays a
  /// moment for its peers to read why it broke.
  ~Impl();

  const Config config;
  const CallTimeout call_timeout;  ///< config.timeout_s, converted once: every call's deadline
  const int rank;
  const int size;
  const int instance;  ///< rank in the communicator this one's set-up started from (transport::PeerInfo::instance)
  const setup::Rendezvous rendezvous;  ///< the store (null on one rank) and its server, shared with the splits
  const setup::Links links;            ///< endpoints by rank, hosts, the fast path: fixed for the communicator's life
  const std::string emulation;         ///< the link emulation in effect, or "off"
  const Tuner tuner;
  MeasuredChoices measured;  ///< TBCOLL_TUNER=measure and TBCOLL_TUNE_FILE: the trials and decisions
  CallCounters calls;
  Health health;
  algo::Scratch scratch;
  algo::RequestTable request_table;
  Notices notices;  // refusals and breakdowns of peers, told through the store (notices.h)
  /// How this communicator's waits pass the time (TBCOLL_WAIT) and what they learnt; its driving thread's.
  transport::WaitPolicy wait_policy;
  std::unique_ptr<P2pInFlight> p2p_in_flight;  ///< isend/irecv posted and unfinished; made by the first
  /// The last calls, per-peer figures and, once broken, why (flight/recorder.h): written as calls begin and end.
  flight::Recorder flight;

  void mark_broken(const std::string& reason);
  /// Asynchronous calls are refused between group_start and group_end (the group records send/recv only).
  void check_not_in_group(const char* call, const char* suffix = "") const {
    if (calls.group_depth > 0) {
      throw InvalidUsage(fmt::format("rank {}: {}{} inside a group: groups take send and recv only", rank, call,
                                     suffix));
    }
  }
  void check_usable(const algo::CallInfo& call) {
    if (health.broken()) throw_broken(call);
    if (calls.group_depth > 0 && std::string(call.name) != "send" && std::string(call.name) != "recv") {
      throw InvalidUsage(fmt::format("rank {}: {} inside a group: groups take send and recv only", rank,
                                     call.describe()));
    }
  }
  [[noreturn]] void throw_broken(const algo::CallInfo& call);
  /// A collective call's checks and choice (prepare); the driving thread keeps the last one per collective
  /// (prepared), so a call that repeats its collective's last shape checks its pointers only (prepare_cached).
  struct Prepared {
    bool valid = false;  ///< holds a checked shape (prepared's slots start empty)
    ReduceOp op = ReduceOp::kSum;  ///< as the caller passed them (run's are normalised for collectives without)
    int root = 0;
    CheckedShape checked;
    const Choice* choice = nullptr;  ///< the tuner's choice; null on one rank (nothing to run) and in an empty slot
    algo::CallInfo what;  ///< the call as errors name it
    /// What the schedule or fast path is given: the caller's count, dtype and the buffers whose checks passed (a
    /// call with the same ones skips them); op and root as the collective takes them.
    algo::Args run;
    bool divides_first = false;  ///< an f16 average: the inputs are divided before the sum (collectives.cc)
    /// The call runs on the transport's fast path with nothing to do before it (no f16 division, no count of
    /// zero, no measured tuning): a call that repeats the shape and the buffers goes straight there (call_hot).
    bool hot = false;
    /// A hot call's preparation by the fast path, and the arguments it runs with: made once per shape (the
    /// buffers follow the checked ones; tag and deadline are set per call by run_prepared).
    std::unique_ptr<transport::PreparedFastCall> fast;
    transport::CollectiveArgs fast_args;
  };
  std::array<Prepared, kNumOpKinds> prepared{};
  /// The argument checks of a call (call_checks.h) and the tuner's choice for it; InvalidArgument naming what is
  /// wrong (a forced algorithm that cannot run the call included). Any thread.
  Prepared prepare(const CollectiveTraits& traits, const CallArgs& args) const;
  /// prepare(), through prepared. The thread that drives the communicator only.
  Prepared& prepare_cached(const CollectiveTraits& traits, const CallArgs& args);
  /// What a prepared fast-path call's wait looks at while it sleeps (as run_fast_path's): the running call's
  /// notices, and pending isend/irecv. One per communicator, told each call's tag, so the prepared arguments that
  /// refer to it are made once; the call's deadline is read the first time it looks (as the wait's own).
  struct PreparedWatch {
    Impl* impl;
    uint64_t tag = 0;
    mutable Deadline deadline = Deadline::min();  ///< min(): not read yet
    void operator()() const;
  };
  PreparedWatch prepared_watch{this};
  /// Runs a hot call (call.hot) through its prepared fast-path call, with the next call number.
  void run_prepared(Prepared& call);
  /// Called while handling the InvalidArgument of a refused call, which it rethrows: on a communicator of
  /// several ranks the call's number is used up here and the peers are told (Notices::kRefused), so those for
  /// whom the call is valid fail at once with this rank's reason, and ranks that all refused it stay in step.
  /// Drains the asynchronous queue first then.
  [[noreturn]] void refuse_call();
  /// The one call path of the collectives with a traits row (blocking; the asynchronous queue drained by the
  /// caller, or the call is the queue's).
  void collective(const CollectiveTraits& traits, const CallArgs& args);
  /// A public blocking call: the queued calls first, then collective().
  void call(OpKind kind, const CallArgs& args) {
    if (!call_hot(kind, args)) call_checked(kind, args);
  }
  /// A call that repeats its collective's last shape and buffers, where those are `hot`, on a communicator that
  /// is usable, outside a group and with no call queued: every check of prepare() held for exactly these
  /// arguments, so it runs the fast path at once (the per-call cost of tensor parallelism's small all_reduces).
  /// False, having done nothing, for any other call.
  bool call_hot(OpKind kind, const CallArgs& args) {
    // The queue's worker writes prepared while calls are queued; idle() (acquire) orders this read after its
    // last write, so it is checked first. call_checked says why a call that is not hot goes the long way.
    if (!async.idle() || health.broken() || calls.group_depth > 0) return false;
    Prepared& last = prepared[static_cast<size_t>(kind)];
    if (!last.hot || last.run.send != args.send || last.run.recv != args.recv || last.run.count != args.count ||
        last.run.dtype != args.dtype || last.op != args.op || last.root != args.root) {
      return false;
    }
    run_prepared(last);
    return true;
  }
  void call_checked(OpKind kind, const CallArgs& args);
  /// A public asynchronous call: checked (and refused) here, on the caller's thread, then queued (async.cc).
  Work submit(OpKind kind, const CallArgs& args);
  /// Runs body with an Exec for one call; turns transport errors into errors that name the op. The call's
  /// messages carry its signature with the schedule's number (0 for send/recv) added: ranks tuned to different
  /// schedules are told so.
  template <typename Body>
  void run(const algo::CallInfo& call, transport::Tag tag, unsigned schedule, Body&& body);
  /// Runs the chosen algorithm for a collective: its schedule through run(), or the transport's fast path.
  void execute(const algo::CallInfo& call, transport::Tag tag, const Choice& choice, const algo::Args& args);
  /// execute() for a choice of the transport's fast path (choice.fast_path_index >= 0).
  void run_fast_path(const algo::CallInfo& call, const transport::Tag& tag, const Choice& choice,
                     const algo::Args& args);
  /// execute() for a checked call: its choice, or under TBCOLL_TUNER=measure the measured one (a trial, timed,
  /// and after the octave's last trial the ranks' agreement on the fastest: tuner_measured.h).
  void execute_checked(const algo::CallInfo& call, transport::Tag tag, const algo::CallShape& shape,
                       const Choice& choice, const algo::Args& args);
  /// all_to_allv's counts and displacements are checked (and null displacements made packed ones) by
  /// check_all_to_allv, and the call runs on its copy of them (the asynchronous form keeps it).
  struct AllToAllvLayout {
    std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;  ///< per peer, in elements
    size_t sent = 0;       ///< elements this rank sends in all (for error messages)
    const Choice* choice = nullptr;  ///< null on one rank
  };
  AllToAllvLayout check_all_to_allv(const void* send, const void* recv, const size_t* send_counts,
                                    const size_t* send_displs, const size_t* recv_counts, const size_t* recv_displs,
                                    DataType dtype) const;
  void all_to_allv(const void* send, void* recv, const AllToAllvLayout& layout, DataType dtype);
  /// send (is_send) or recv of count elements with peer; buf is only read for a send.
  void p2p(bool is_send, void* buf, size_t count, DataType dtype, int peer);
  /// Runs body as one call the flight recorder keeps (guard_errors within).
  /// call_number: the collective's tag (0 for send/recv and groups).
  template <typename Body>
  void guard(const algo::CallInfo& call, uint64_t call_number, Body&& body);
  /// Runs body, turning its errors into errors that name the call, and marking the communicator broken.
  /// call_number: the collective's tag (0 for send/recv), for the notice a failure publishes.
  template <typename Body>
  void guard_errors(const algo::CallInfo& call, uint64_t call_number, Body&& body);

  /// A rooted call's check of its neighbours' signatures (execute()): the empty message from its left neighbour
  /// that had not arrived, or the one to its right neighbour that had not left (on tcp it waits to go with a later
  /// message), when the call's own messages were done: a rank that only sends does not wait for them. Settled as
  /// later calls start, every kSettleFrom calls (a mismatch fails that call, naming the call it belongs to), as a
  /// call starts to wait, before a fast-path call, and as the communicator is destroyed; at most
  /// kMaxDeferredChecks wait, then the oldest is waited for (a root far ahead of its peers waits there).
  struct DeferredCheck {
    std::unique_ptr<transport::Request> request;
    algo::CallInfo call;
    uint64_t number = 0;
    Deadline deadline;
  };
  static constexpr size_t kMaxDeferredChecks = 8;
  static constexpr uint64_t kSettleFrom = 8;  ///< deferred checks are settled every this many calls
  std::deque<DeferredCheck> deferred_checks;
  bool settling_checks = false;
  /// Tests the deferred checks, oldest first, each as its own call would (errors name it); waits for them (all),
  /// or for the oldest while more than kMaxDeferredChecks are left. A fast-path call settles all first: it takes a
  /// message of an earlier call left in a peer's queue for a mismatch.
  void settle_checks(bool all);
  void settle_at_exit() noexcept;

  // Declared last, so destroyed first: queued calls finish while every member above (prepared calls included)
  // still exists.
  AsyncQueue async;
};

}  // namespace tbcoll
