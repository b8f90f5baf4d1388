// One queue pair between two ports (a rank's presence on an RDMA device, see port.h), shared by every
// communicator of both: frames of each communicator are told apart by its id (wire.h).
//
// Flow control: the receiver keeps kRecvDepth 4 KiB receives posted for the peer; the sender holds one credit per
// receive it may consume, and gets them back in the headers of the peer's frames (or in a credit-only frame when
// the peer has nothing to send). A data frame needs two credits and a credit-only frame one, so either side can
// always return credits: no SEND ever finds no receive (UC would drop it silently).
//
// Liveness: UC reports nothing when the peer dies, so a TCP side channel stays open beside the queue pair. Its
// end-of-file (the peer process exited or crashed) or an abort notice fails the waiting requests within
// milliseconds; every wait also has the communicator's deadline.
//
// Loss: UC drops frames without a word (a cable pulled and plugged back). A gap in the sequence numbers shows at
// the next frame, but a lost frame that nothing follows (the last of a message, or of the credits) would leave
// both ends waiting for the deadline. So, in UC, a connection polled by a waiter while no frame came for
// kProbeAfter tells the peer (side channel) how many frames it has posted and asks for the peer's count: a count
// above what arrived, still short a grace period later, fails the connection as lost frames.
//
// Threads: every method locks the connection; the communicators sharing it may run on different threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tbcoll/transport.h"
#include "transports/ibverbs/memory.h"
#include "transports/ibverbs/mode.h"
#include "transports/ibverbs/verbs.h"
#include "transports/ibverbs/wire.h"

namespace tbcoll::ibverbs {

/// The queue pair type two ports use: what both have if they agree; UC when they differ and either chose
/// automatically (TBCOLL_IB_MODE=auto: every device that has RC has UC too). Two forced modes that differ: throws
/// IoError naming both.
Mode pair_mode(Mode local, bool local_auto, Mode peer, bool peer_auto, const std::string& who);

/// What the local end brings to a connection.
struct LocalPort {
  const VerbsApi* verbs = nullptr;
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  std::string device;  ///< "rdma_en3", "rxe0"
  uint8_t port = 1;
  int gid_index = 0;
  ibv_gid gid{};
  uint16_t lid = 0;
  ibv_mtu mtu = IBV_MTU_1024;
  Mode mode = Mode::kUc;   ///< what this port uses (TBCOLL_IB_MODE, or what the device showed it has for auto)
  bool auto_mode = false;  ///< mode was chosen automatically: a peer with less is met in UC
  int post_batch = 16;     ///< frames posted per ibv_post_send call at most (one doorbell each)
};

class Endpoint;

class Connection {
 public:
  static constexpr int kRecvDepth = 32;  ///< receives posted for the peer (Apple: more than ~32 fails on some versions)
  static constexpr int kSendDepth = 32;  ///< frames in flight
  static constexpr int kMaxPostBatch = kSendDepth;

  /// Creates the queue pair (INIT, of type mode) and its registered buffers. Throws IoError naming the verb and
  /// errno.
  Connection(const LocalPort& local, Mode mode, std::string peer_key, int side_channel);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// This end's half of the handshake (queue pair number, GID, ...).
  wire::Hello hello(const std::string& key) const;
  /// Moves the queue pair to RTR and RTS towards the peer's hello, posts the receives, and tells the peer (side
  /// channel) it may send; returns once the peer said the same. Throws IoError with a hint (no IPv4 GID, ...).
  void establish(const wire::Hello& peer, Deadline deadline, const std::atomic<bool>* cancelled);

  const std::string& peer_key() const { return peer_key_; }
  const std::string& device() const { return local_.device; }
  Mode mode() const { return mode_; }
  /// Data frames and payload bytes sent on this connection so far (every communicator's). Any thread.
  uint64_t frames_sent() const { return frames_sent_.load(std::memory_order_relaxed); }
  uint64_t payload_sent() const { return payload_sent_.load(std::memory_order_relaxed); }
  /// False once the peer is gone or a frame was lost; then every request on it fails.
  bool alive() const { return failure_.empty(); }

  /// Routes frames of comm_id to endpoint, for which this connection is rail `rail` (frames that came before go
  /// to it now). Detach before destroying it.
  void attach(uint64_t comm_id, Endpoint* endpoint, int rail);
  void detach(uint64_t comm_id);
  /// An endpoint (for which this connection is rail `rail`) with something to send.
  void want_to_send(Endpoint* endpoint, int rail);
  /// Tells the peer that communicator comm_id was aborted here (side channel). Never throws.
  void notify_abort(uint64_t comm_id);

  /// Polls completions, routes arrived frames, posts sends and credits. Throws IoError once the connection failed
  /// (naming why). Caller holds no lock.
  void progress();
  /// Sleeps up to max_wait (at most 100 us): what a waiter does once its spin phase is over.
  void block(std::chrono::microseconds max_wait);

  std::mutex& mutex() { return mutex_; }

 private:
  void progress_locked();
  void poll_locked();
  void on_frame(int slot, uint32_t bytes);
  void pump_sends_locked();
  /// Seals the frame in send slot `slot` (its payload already in place) and adds it to the batch of work
  /// requests, posted when full (LocalPort::post_batch) or by flush_locked().
  void post_frame(int slot, wire::Header header);
  void flush_locked();
  void post_recv(int slot);
  void check_side_channel_locked();
  /// Tells the peer how many frames this end has posted (UC loss detection); asks for its count if `ask`.
  void send_count_locked(bool ask);
  void check_loss_locked(Clock::time_point now);
  [[noreturn]] void fail_locked(const std::string& why);
  struct Attached {
    Endpoint* endpoint = nullptr;
    int rail = 0;
  };
  Attached* endpoint_of(uint64_t comm_id);

  LocalPort local_;
  Mode mode_;
  std::string peer_key_;
  int side_channel_;
  ibv_cq* cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  RegisteredMemory memory_;  // kRecvDepth receive frames, then kSendDepth send frames
  uint8_t* frames_ = nullptr;
  ibv_mr* mr_ = nullptr;
  uint32_t psn_ = 0;
  uint8_t side_buffer_[64] = {};  // notices read from the side channel, not yet whole
  size_t side_bytes_ = 0;

  std::mutex mutex_;
  std::string failure_;  // set once: why the connection is dead
  uint32_t send_seq_ = 0;
  uint32_t recv_seq_ = 0;
  int credits_ = 0;         // receives the peer has posted for us that we have not consumed
  uint32_t owed_ = 0;       // receives we reposted and not yet reported to the peer
  uint64_t reported_ = 0;   // credits reported to the peer in all
  uint64_t frames_in_ = 0;  // frames received from the peer in all
  int peer_depth_ = 0;
  std::vector<int> free_send_slots_;
  ibv_send_wr batch_[kMaxPostBatch] = {};
  ibv_sge batch_sge_[kMaxPostBatch] = {};
  int batched_ = 0;
  std::map<uint64_t, Attached> endpoints_;
  std::map<uint64_t, std::deque<std::vector<uint8_t>>> early_;  // frames of communicators not attached yet
  std::map<uint64_t, std::string> aborted_;                     // comm ids the peer aborted
  std::deque<std::pair<Endpoint*, int>> senders_;  // with their rail on this connection
  std::atomic<uint64_t> frames_sent_{0};
  std::atomic<uint64_t> payload_sent_{0};
  Clock::time_point next_side_check_{};
  Clock::time_point gone_at_{};  // when the side channel closed; zero while the peer is there
  uint64_t posted_ = 0;          // frames posted to the peer in all (data and credit)
  Clock::time_point last_frame_at_{};
  Clock::time_point next_probe_{};
  uint64_t peer_posted_ = 0;            // a count the peer told us of that had not all arrived (0: none)
  Clock::time_point peer_posted_at_{};  // when it told us
};

}  // namespace tbcoll::ibverbs
