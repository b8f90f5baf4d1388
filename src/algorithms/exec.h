// Exec: what an algorithm sees of one collective call. Peers by rank, the call's tag and signature, its
// deadline, scratch memory, and a request set whose waits spin first and then block, never past the deadline.
// Algorithms are written against this alone: they never see transports or communicators.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tbcoll/tbcoll.hpp"
#include "tbcoll/transport.hpp"

namespace tbcoll::algo {

/// Grow-only, 64-byte aligned scratch memory owned by the communicator.
class Scratch {
 public:
  void* get(size_t bytes);

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> memory_;
  size_t bytes_ = 0;
};

/// What a call is, for error messages; formatted only when an error needs it (the fast path never does).
struct CallInfo {
  const char* name = "";  ///< "all_reduce", "send", ...
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  bool has_op = false;
  int root = -1;  ///< root (broadcast) or peer (send/recv); -1 when none
  const char* root_name = "root";
  const char* count_name = "count";  ///< "sent" for all_to_allv (its total; the counts are per peer)
  /// "all_reduce(count=1024, f32, sum)", "broadcast(count=8, i8, root=3)", "barrier()".
  std::string describe() const;
};

struct Args {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  size_t elem_size = 4;
  /// all_to_allv only: per peer, elements sent to / received from it and where they are (in elements from
  /// send / recv). In place (send == recv), the send side is the receive side.
  const size_t* send_counts = nullptr;
  const size_t* send_displs = nullptr;
  const size_t* recv_counts = nullptr;
  const size_t* recv_displs = nullptr;
};

/// Request bookkeeping of one call. Owned by the communicator and reused, so a small collective does not
/// allocate its containers again on every call.
}  // namespace tbcoll::algo
namespace tbcoll::flight {
struct PeerFigures;
}  // namespace tbcoll::flight
namespace tbcoll::algo {

struct RequestTable {
  struct Pending {
    std::unique_ptr<transport::Request> request;
    int peer;
    bool is_send;
    size_t bytes;
  };
  std::vector<Pending> requests;
  std::vector<uint8_t> done;
  // Per peer and direction, the ids not yet complete, oldest first (transports complete them in order).
  std::vector<std::deque<size_t>> pending_sends, pending_recvs;
  std::vector<int> active_peers;
  /// Called at every poll of a wait: progresses requests posted outside the call (non-blocking sends and
  /// receives still pending, p2p_async.h), so they move while the call waits. Kept across calls; may be empty.
  std::function<void()> also_progress;
  /// Called once in a wait that lasts Exec::kFlushAfter: the communicator looks at what earlier calls left
  /// unfinished (deferred checks), which may be what keeps this one waiting. Kept across calls; may be empty.
  std::function<void()> on_long_wait;
  /// The flight recorder's figures by peer (bytes, messages, waits) and where a timed-out wait names its peer;
  /// null when it is off.
  flight::PeerFigures* figures = nullptr;
  std::atomic<int32_t>* stalled_on = nullptr;

  void reset(int world_size);
};

class Exec {
 public:
  /// A wait that lasts this long flushes every endpoint (Endpoint::flush).
  static constexpr std::chrono::microseconds kFlushAfter{1000};

  /// max_message[p]: the largest message peer p's transport takes (Capabilities::max_message_bytes).
  /// host_of[p]: the host of rank p (hosts numbered 0.. in the order of their lowest rank); null: one host.
  Exec(int rank, int size, const std::vector<transport::Endpoint*>& peers, const std::vector<size_t>& max_message,
       transport::Tag tag, Deadline deadline, transport::WaitPolicy& wait, size_t chunk_bytes, Scratch& scratch,
       RequestTable& table, const CallInfo& call, const std::vector<int>* host_of = nullptr);

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The host of rank p, as the communicator grouped its ranks (TBCOLL_HOST_ID, else the machine).
  int host_of(int p) const { return host_of_ == nullptr ? 0 : (*host_of_)[static_cast<size_t>(p)]; }
  size_t chunk_bytes() const { return chunk_bytes_; }
  Scratch& scratch() { return scratch_; }

  /// Posts a send / receive to peer with the call's tag; returns an id for wait(). A transfer larger than the
  /// peer's transport takes goes as consecutive messages of at most that size (both sides split alike); the
  /// id is the last one's, which completes after the others (a peer's requests complete in order).
  size_t isend(int peer, const void* buf, size_t bytes) { return isend(peer, buf, bytes, tag_); }
  size_t irecv(int peer, void* buf, size_t bytes) { return irecv(peer, buf, bytes, tag_); }
  /// The same with an explicit tag (grouped point-to-point calls carry one tag each).
  size_t isend(int peer, const void* buf, size_t bytes, transport::Tag tag);
  size_t irecv(int peer, void* buf, size_t bytes, transport::Tag tag);
  /// An empty message to peer with the call's tag that may leave later (Endpoint::isend_later): with the next
  /// message to that peer, or once a wait of this call lasts a millisecond (every endpoint is flushed then).
  size_t isend_later(int peer);
  /// Waits until request id completed, progressing every pending request meanwhile.
  void wait(size_t id);
  /// Waits for every request posted so far.
  void wait_all();
  /// Marks request id as the caller's own, beside the schedule: wait_all() (the schedule's and the caller's)
  /// does not wait for it (at most two such requests a call).
  void set_aside(size_t id);
  /// Every endpoint's isend_later messages leave now (Endpoint::flush).
  void flush_all();
  /// Whether request id completed.
  bool done(size_t id) const { return done_[id] != 0; }
  /// Takes request id out of this call, unfinished: the caller finishes it (or drops it, which tells its
  /// transport the stream is out of sync). Only for the last pending request of its peer and direction.
  std::unique_ptr<transport::Request> detach(size_t id);
  /// Called now and then while a wait blocks (past its spin phase), never while spinning: the communicator
  /// looks there for peers that refused the call or broke (Notices), and it throws to end the wait.
  void set_watch(transport::Watch watch) { watch_ = watch; }

 private:
  bool sweep();  // one progress pass; true if anything completed
  void look_at_peers();  // the watch, past a spin phase
  size_t post(int peer, bool is_send, void* buf, size_t bytes, transport::Tag tag);
  [[noreturn]] void timed_out(size_t id);
  // Adds a wait on peer that lasted beyond its first look to the flight recorder's figures.
  void count_wait(int peer, std::chrono::steady_clock::duration waited);

  int rank_;
  int size_;
  const std::vector<transport::Endpoint*>& peers_;
  const std::vector<size_t>& max_message_;
  transport::Tag tag_;
  Deadline deadline_;
  transport::WaitPolicy& wait_;
  size_t aside_[2] = {SIZE_MAX, SIZE_MAX};  ///< set_aside()
  bool look_aside_ = false;  ///< a wait lasted kFlushAfter: sweeps test the requests set aside too
  size_t chunk_bytes_;
  Scratch& scratch_;
  RequestTable& table_;
  std::vector<RequestTable::Pending>& requests_;
  std::vector<uint8_t>& done_;
  std::vector<std::deque<size_t>>& pending_sends_;
  std::vector<std::deque<size_t>>& pending_recvs_;
  std::vector<int>& active_peers_;
  const std::vector<int>* host_of_;
  transport::Watch watch_;
};

}  // namespace tbcoll::algo
