// The flight recorder of one communicator rank: its last calls, its per-peer figures and, once it fails, why,
// written in place to its flight file (flight_file.h) as calls begin and end. On by default: a call costs a
// coarse clock read and a few stores into a line of the ring, no system call. TBCOLL_FLIGHT_CALLS=0 turns it off.
//
// The file goes to TBCOLL_FLIGHT_DIR (default ${TMPDIR:-/tmp}/tbcoll-flight-<uid>), named after the communicator
// and the rank; a clean end removes it, a failure or an abort keeps it (tbcoll-doctor reads it then). A process
// that dies or is stopped leaves it as it was: what it did last.
//
// TBCOLL_TRACE=DIR also keeps each call's precise begin and end, written as Chrome trace JSON (chrome://tracing,
// Perfetto) to DIR when the communicator is destroyed (failed or not): one track per rank, one event per call.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/exec.h"
#include "common/env.h"
#include "flight/flight_file.h"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll::flight {

class Recorder {
 public:
  /// Off: every call below does nothing.
  Recorder() = default;
  /// On unless TBCOLL_FLIGHT_CALLS is 0 (or the file cannot be made: then a warning, and off). transports: by
  /// rank, the transport to each peer.
  Recorder(const env::Settings& settings, int rank, int size, uint64_t comm_id,
           const std::vector<std::string>& transports);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  bool on() const { return header_ != nullptr; }
  const std::string& path() const { return path_; }

  /// The schedule or fast path the next begin() runs (its name must outlive the call).
  void will_run(const char* algorithm) { algorithm_ = algorithm; }
  /// A call begins: seq is its collective number, or for send/recv/groups the number of collectives before it.
  /// Returns its record (null when off).
  CallRecord* begin(const algo::CallInfo& call, uint64_t seq, bool collective) noexcept;
  /// The call of record ended (ok or failed).
  void end(CallRecord* record, bool ok) noexcept;

  /// Per peer, for the scheduled calls' waits and transfers (null when off).
  PeerFigures* peers() { return peers_; }
  /// Where a wait whose deadline passed names the peer it waited on (null when off).
  std::atomic<int32_t>* stalled_on() { return header_ != nullptr ? &header_->stalled_on : nullptr; }
  /// The communicator broke (a failed call) or was aborted: the reason goes into the file, which is kept.
  void failed(const std::string& reason, bool aborted = false) noexcept;

  /// Receives each call's begin and end (Communicator::set_call_observer); empty: none.
  void observe(std::function<void(const CallEvent&)> observer) {
    observer_ = std::move(observer);
    precise_ = tracing_ || observer_;
  }

 private:
  static constexpr size_t kText = sizeof(CallRecord::name);  ///< bytes of a record's name and algorithm
  static_assert(sizeof(CallRecord::algorithm) == kText, "one text size");
  struct Cached {
    const char* source = nullptr;  ///< the text last copied, and its bytes
    char bytes[kText] = {};
  };
  static void copy_cached(char (&into)[kText], const char* text, Cached& cache) noexcept;
  static CallKind kind_of(const char* name) noexcept;
  void tell(CallEvent::Phase phase, bool ok, double seconds) noexcept;
  void write_trace() noexcept;

  std::string path_;
  Header* header_ = nullptr;
  PeerFigures* peers_ = nullptr;
  CallRecord* ring_ = nullptr;
  size_t mapped_bytes_ = 0;
  uint32_t capacity_ = 0;
  int64_t unix_offset_us_ = 0;  ///< Unix time minus steady time, in microseconds
  const char* algorithm_ = "";
  Cached name_cache_, algorithm_cache_;
  // Precise times (a trace or an observer): the running call's begin, and the events kept for the trace.
  std::chrono::steady_clock::time_point began_{};
  CallEvent current_;  ///< the running call as the observer and the trace see it
  bool tracing_ = false;
  bool precise_ = false;  ///< tracing_ or an observer: calls read the precise clock
  std::mutex failing_;    ///< failed() may come from any thread (an abort)
  std::string trace_dir_;
  int rank_ = -1;
  uint64_t comm_id_ = 0;
  struct TraceEvent {
    int64_t begin_us;  ///< Unix time
    int64_t duration_us;
    uint64_t seq;
    uint64_t count;
    const char* name;
    const char* algorithm;
    int root;
    DataType dtype;
    ReduceOp op;
    bool has_op;
    bool ok;
  };
  std::vector<TraceEvent> trace_;
  std::function<void(const CallEvent&)> observer_;
};

}  // namespace tbcoll::flight
