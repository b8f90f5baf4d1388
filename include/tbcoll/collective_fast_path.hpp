// A transport's whole-collective fast path: algorithms that run a collective in one piece where the hardware
// allows far better than point-to-point messages (one-shot reductions through memory all ranks share, say).
//
// The transport describes what it offers (FastPathAlgorithm: which collective, up to which size, which dtypes,
// and the size range where it should be the default); the communicator puts those algorithms in its table
// next to the point-to-point schedules, the tuner picks among them by that description, TBCOLL_ALGO can force
// them by name, and the collective suites test them like any algorithm. The core never knows what they do.
//
// Threads: one thread at a time drives a fast path (the communicator's caller, or its progress thread).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tbcoll/deadline.hpp"
#include "tbcoll/export.h"
#include "tbcoll/op_kind.hpp"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll::transport {

/// Message identity: tag orders messages, meta is a signature the receiver checks (e.g. op, dtype, count).
/// The communicator's tags: collective calls count up from 1 (the same on every rank); send/recv tags have the
/// top bit set and count each direction of a pair on its own. Transports use this only to spot mismatched calls.
struct Tag {
  uint64_t tag = 0;
  uint64_t meta = 0;
};
/// The tag of a pair's n-th send/recv message in one direction (the top bit marks send/recv tags).
constexpr uint64_t p2p_tag(uint64_t n) { return (uint64_t{1} << 63) | n; }
/// Whether a tag is a send/recv message's (else a collective's).
constexpr bool is_p2p_tag(uint64_t tag) { return (tag >> 63) != 0; }

/// Whether two signatures describe the same call (the schedule point-to-point messages add is ignored).
TBCOLL_API bool same_call(uint64_t meta_a, uint64_t meta_b);
/// "all_reduce(count=1024 mod 2^32, f32, sum)"-style description of a signature, for error messages.
TBCOLL_API std::string describe_signature(uint64_t meta);

/// One algorithm a fast path offers. Sizes are in the tuner's bytes: the input per rank for all_reduce and
/// broadcast, the gathered total for all_gather.
struct FastPathAlgorithm {
  std::string name;         ///< as TBCOLL_ALGO names it; unique among the transport's algorithms
  OpKind kind = OpKind::kAllReduce;
  std::string description;  ///< one line: what it does and what it costs
  size_t max_bytes = SIZE_MAX;  ///< the largest call it can run; larger ones are refused when it is forced
  /// The tuner picks it for calls of auto_min_bytes <= bytes < auto_max_bytes (checked before the point-to-point
  /// schedules, in the order of algorithms()); an empty range means only when forced.
  size_t auto_min_bytes = 0;
  size_t auto_max_bytes = 0;
  /// Bit d set: takes DataType d. Reductions take every op of that dtype.
  uint32_t dtypes = (1u << kNumDataTypes) - 1;

  bool takes(DataType dtype) const { return (dtypes >> static_cast<int>(dtype) & 1u) != 0; }
};

/// How a spinning wait shares its CPU (spin_yield_policy() in the core decides, per communicator and machine).
enum class SpinYield : uint8_t {
  kNever,       ///< every rank has CPUs of its own: a yield only costs a system call and lets other tasks in
  kNowAndThen,  ///< another rank may run on one of this rank's CPUs: sched_yield every few thousand polls
  kEveryPoll,   ///< more ranks than CPUs on the machine: sched_yield after every fruitless poll, as the peer
                ///< waited for is likely runnable but not running
};

/// How a communicator's waits spend the time until their data comes (TBCOLL_WAIT). One per communicator, used by
/// the thread that drives its calls (one at a time). A wait that does not end at once calls begin() at its first
/// clock read, spins while spinning(now) says so (at each clock read; yielding as yield() says), then sleeps in
/// the transport in bounded slices (a futex, a socket's recv or poll). A wait that ends before its first clock
/// read asks nothing.
///
/// Auto spins up to TBCOLL_SPIN_US, then sleeps: 300 us between ranks that all meet over shm (the peer's futex
/// wake ends a sleep), 20 ms otherwise (a peer that is merely late; sleeping sooner pays a wake-up per call on a
/// quiet machine). It adapts to a busy machine, where a spin holds a CPU that the late peer or the engine's own
/// threads need: a spin sees contention when its clock reads jump by kPreemptedGap (kYieldedGap across a
/// sched_yield) and the thread lost its CPU meanwhile (involuntary context switches, where the system counts them
/// per thread; elsewhere the gap alone), or when, past kLookAfter, a look at the machine (every kLookEvery,
/// where the system tells at once) finds more threads runnable than there are CPUs. Seen twice within
/// kConfirmWithin (once is a passing task), contention ends the spin, and for kContendedFor after the last sign
/// auto sleeps at once. The spin's cost is a comparison per clock read and a system call per kLookEvery of a
/// spin longer than kLookAfter; waits that end sooner pay nothing.
class TBCOLL_API WaitPolicy {
 public:
  enum class Mode : uint8_t {
    kAuto,   ///< spin up to the spin cap (TBCOLL_SPIN_US), then sleep; sleep at once while the CPUs are contended
    kSpin,   ///< spin (yielding as yield() says) until the data comes or the deadline passes
    kBlock,  ///< sleep at the first clock read (after ~1 us of polls)
  };
  WaitPolicy() = default;
  WaitPolicy(Mode mode, std::chrono::microseconds spin_cap, SpinYield yield)
      : mode_(mode), cap_(spin_cap), yield_(yield) {}

  Mode mode() const { return mode_; }
  SpinYield yield() const { return yield_; }
  /// How long auto spins before it sleeps (TBCOLL_SPIN_US, resolved).
  std::chrono::microseconds spin_cap() const { return cap_; }
  /// At a wait's first clock read: starts its spin phase.
  void begin(Clock::time_point now) {
    last_read_ = now;
    yielded_ = false;
    next_look_ = now + kLookAfter;
    if (mode_ != Mode::kAuto) {
      spin_until_ = mode_ == Mode::kBlock ? now : now + kSpinPhase;
    } else {
      spin_until_ = now < contended_until_ ? now : now + cap_;
    }
  }
  /// Whether the wait keeps spinning at this clock read (under auto, contention seen ends the spin).
  bool spinning(Clock::time_point now) {
    if (mode_ == Mode::kAuto) {
      if (now - last_read_ >= (yielded_ ? kYieldedGap : kPreemptedGap)) gap(now);
      if (now >= next_look_) look_at_machine(now);
    }
    last_read_ = now;
    yielded_ = false;
    return now < spin_until_;
  }
  /// The wait called sched_yield after its last clock read: if the next read comes kYieldedGap or more later,
  /// another thread ran on this CPU meanwhile (a yield with nothing else to run returns in a microsecond or two).
  void yielded() { yielded_ = true; }
  /// What a look at the machine asks: how many threads are runnable (-1: the system does not tell), on how
  /// many CPUs. platform::runnable_threads() and the online CPUs unless set. Tests give their own, and then
  /// every clock gap counts as a sign (the thread's real switch count is not asked).
  using MachineProbe = int (*)();
  void set_machine_probe(MachineProbe probe, int cpus) {
    probe_ = probe;
    cpus_ = cpus;
  }
  /// False under kSpin: past a spin phase (1 ms), a wait looks at its peers and watch, then begins another.
  bool sleeps() const { return mode_ != Mode::kSpin; }
  /// "auto (spin up to 20000 us, then sleep; ...)", "spin", "block".
  std::string describe() const;
  static const char* name(Mode mode);

  static constexpr std::chrono::microseconds kSpinPhase{1000};  ///< kSpin: between looks at the peers
  /// A spin's clock reads come every microsecond or so; a gap this long means the thread was not running.
  static constexpr std::chrono::microseconds kPreemptedGap{200};
  static constexpr std::chrono::microseconds kYieldedGap{20};
  static constexpr std::chrono::microseconds kLookAfter{100};
  static constexpr std::chrono::microseconds kLookEvery{1000};
  static constexpr std::chrono::milliseconds kConfirmWithin{5};
  static constexpr std::chrono::milliseconds kContendedFor{100};
  /// A schedule's sleeping wait (algo::Exec) looks at the peers' notices only once it has lasted this long: a
  /// late peer's data mostly comes sooner, and the look (a store round trip, which allocates) is for peers that
  /// failed.
  static constexpr std::chrono::microseconds kWatchAfter{1000};
  /// TBCOLL_SPIN_US=auto: 300 us where every peer is over shm, 20 ms otherwise.
  static std::chrono::microseconds auto_spin_cap(bool all_shm) {
    return std::chrono::microseconds(all_shm ? 300 : 20000);
  }

 private:
  Mode mode_ = Mode::kAuto;
  std::chrono::microseconds cap_{20000};
  SpinYield yield_ = SpinYield::kNowAndThen;
  Clock::time_point spin_until_{};
  Clock::time_point last_read_{};
  Clock::time_point next_look_{};
  Clock::time_point last_sign_{};        ///< the last sign of contention
  Clock::time_point contended_until_{};  ///< auto sleeps at once until then
  MachineProbe probe_ = nullptr;         ///< null: platform::runnable_threads()
  int cpus_ = 0;                         ///< 0: the online CPUs
  long switches_ = -1;                   ///< platform::involuntary_switches() at the last gap
  bool yielded_ = false;                 ///< yielded() since the last clock read
  bool told_ = false;                    ///< contention was logged (once per communicator, at INFO)

  /// A spin's look at the machine (platform::runnable_threads): a sign of contention when more threads are
  /// runnable than there are CPUs.
  void look_at_machine(Clock::time_point now);
  /// A clock gap at `now`: a sign of contention if the thread lost its CPU meanwhile (platform::
  /// involuntary_switches grew; where the system does not count them, every gap is a sign), not if the wait was
  /// working (a sweep that moved megabytes).
  void gap(Clock::time_point now);
  /// A sign at `now`: the spin lost `lost` (a clock gap), or `runnable` threads want the CPUs. The second within
  /// kConfirmWithin ends the spin and makes waits sleep at once for kContendedFor.
  void sign_of_contention(Clock::time_point now, Clock::duration lost, int runnable);
};

/// A callback a wait calls now and then while it sleeps (never while it spins): it throws to end the wait. Refers
/// to a callable it does not own (valid for the call it is given to), so passing one costs no allocation.
class Watch {
 public:
  Watch() = default;
  template <typename Callable>
  explicit Watch(Callable& callable)
      : context_(&callable), call_([](void* context) { (*static_cast<Callable*>(context))(); }) {}
  explicit operator bool() const { return call_ != nullptr; }
  void operator()() const { call_(context_); }

 private:
  void* context_ = nullptr;
  void (*call_)(void*) = nullptr;
};

/// One collective call, as a fast path runs it. send == recv is in place (all_gather: send == recv + rank's block).
struct CollectiveArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  ///< elements per rank (all_gather: of each rank's block)
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  Tag tag;  ///< the call's tag and signature: a peer in another call gets MismatchError
  Deadline deadline;
  std::chrono::microseconds spin{50};  ///< busy-poll this long before sleeping
  SpinYield spin_yield = SpinYield::kNowAndThen;  ///< how spinning hands the CPU over (sched_yield)
  /// When set: called now and then while the call sleeps in a wait (never while spinning); it throws to end
  /// the call (a peer that refused the call or broke, told through the store). The fast path lets it through.
  Watch watch;
  /// A prepared call's deadline is not read before a wait needs it (PreparedFastCall::run): deadline is then
  /// Deadline::min(), and the call's deadline is now + timeout (Clock::duration::max(): none), as call_deadline()
  /// gives it. A call that completes while it spins reads no clock.
  Clock::duration timeout = Clock::duration::max();
  /// The communicator's wait policy (the spin above and spin_yield are its budget and yield); null: spin for spin,
  /// then sleep.
  WaitPolicy* wait = nullptr;
};

/// The call's deadline: args.deadline, or where a prepared call left it to be read when needed, now + args.timeout
/// (Deadline::max() for a timeout beyond what the clock can hold).
inline Deadline call_deadline(const CollectiveArgs& args) {
  if (args.deadline != Deadline::min()) return args.deadline;
  const Clock::time_point now = Clock::now();
  return args.timeout >= Deadline::max() - now ? Deadline::max() : now + args.timeout;
}

/// One shape of a fast-path call, prepared for many runs (CollectiveFastPath::prepare): what run() would decide
/// from the arguments on every call (kernels, layouts, which peers' memory to read) is decided once, so a call
/// that repeats its shape pays for the exchange and little else. Owned by the communicator; it must not outlive
/// the fast path that made it. Threads: as the fast path's (one at a time).
class TBCOLL_API PreparedFastCall {
 public:
  virtual ~PreparedFastCall() = default;
  /// Runs the prepared call: as run(index, args) would, where args has the count, dtype, op, root, spin,
  /// spin_yield and watch it was prepared with (send, recv, tag and deadline may differ from call to call). The
  /// deadline may be left to be read when a wait needs it (args.deadline == Deadline::min(): call_deadline).
  /// Blocks and throws as run().
  virtual void run(const CollectiveArgs& args) = 0;
};

class TBCOLL_API CollectiveFastPath {
 public:
  virtual ~CollectiveFastPath() = default;
  /// What this fast path offers on this communicator, best first. Fixed for the communicator's life, and the
  /// same on every rank (decided jointly at set-up).
  virtual const std::vector<FastPathAlgorithm>& algorithms() const = 0;
  /// Runs algorithms()[index] for the call: collective over every rank, called in the same order everywhere,
  /// with the same algorithm. Blocks: spins for args.spin, then sleeps; TimeoutError past the deadline,
  /// IoError when a peer died or aborted, MismatchError or InvalidUsage when a peer is in another call or runs
  /// it differently. Reductions run in rank order, so every rank holds bitwise identical results.
  virtual void run(size_t index, const CollectiveArgs& args) = 0;
  /// Tells the peers which collective this rank is in (tag and signature), so one waiting in a fast-path call
  /// for a rank that is in another call can report the mismatch instead of waiting for the deadline. The
  /// communicator calls it for collectives that do not go through the fast path; run() announces itself.
  /// Cheap (a few stores to memory only this rank writes).
  virtual void announce(const Tag& tag) = 0;
  /// algorithms()[index]'s call of args' shape (count, dtype, op, root), prepared for repeated runs; the
  /// communicator keeps it while calls repeat the shape. Never null; throws where the shape cannot be prepared
  /// (the call fails with that error, nothing is kept). Does not block, talks to no peer. The default runs
  /// run(index, args) on every call.
  virtual std::unique_ptr<PreparedFastCall> prepare(size_t index, const CollectiveArgs& args);
};

}  // namespace tbcoll::transport
