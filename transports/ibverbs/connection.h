// One link between two ports (a rank's presence on an RDMA device, see port.h), shared by every communicator of
// both: frames of each communicator are told apart by its id (wire.h). A link is two queue pairs, the lanes of
// wire.h: small 4 KiB frames and bulk slots (64-512 KiB), each sent full into a receive of its own size.
//
// Flow control, per lane: the receiver keeps its receives posted for the peer (kSmallDepth frames, the agreed
// number of slots); the sender holds one credit per receive it may consume, and gets them back in the headers of
// the peer's frames and slots (both lanes' credits in every header), or in a credit-only frame when the peer has
// nothing to send. A small data frame needs two small credits and a credit-only frame one, a slot one bulk credit,
// so either side can always return credits: no SEND ever finds no receive (UC would drop it silently).
//
// Liveness: UC reports nothing when the peer dies, so a TCP side channel stays open beside the queue pairs. Its
// end-of-file (the peer process exited or crashed) or an abort notice fails the waiting requests within
// milliseconds; every wait also has the communicator's deadline.
//
// Loss: UC drops frames without a word (a cable pulled and plugged back). A gap in a lane's sequence numbers shows
// at its next frame, but a lost frame that nothing follows (the last of a message, or of the credits) would leave
// both ends waiting for the deadline. So, in UC, a link polled by a waiter while nothing came for kProbeAfter
// tells the peer (side channel) how many frames it has posted on each lane and asks for the peer's counts: a count
// above what arrived, still short a grace period later, fails the link as lost frames.
//
// Threads: every method locks the connection; the communicators sharing it may run on different threads. Each
// connection is a progress context of its own (its queue pairs, completion queue, buffers and lock): driving one
// rail never waits for another. Waiting is the endpoint's (Endpoint::block).
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

#include "tbcoll/transport.hpp"
#include "transports/ibverbs/memory.h"
#include "transports/ibverbs/mode.h"
#include "transports/ibverbs/verbs.h"
#include "transports/ibverbs/wire.h"

namespace tbcoll::ibverbs {

/// The queue pair type two ports use: what both have if they agree; UC when they differ and either chose
/// automatically (TBCOLL_IB_MODE=auto: every device that has RC has UC too). Two forced modes that differ: throws
/// IoError naming both.
Mode pair_mode(Mode local, bool local_auto, Mode peer, bool peer_auto, const std::string& who);

/// Queue pairs a link takes on each side: one per lane. Where a device has no room for two per peer (Apple's 10
/// per device), its links make do with the small lane alone (one queue pair, every message in frames).
constexpr int kQueuePairsPerPeer = wire::kLanes;

/// What the local end brings to a connection.
struct LocalPort {
  const VerbsApi* verbs = nullptr;
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  std::string device;  ///< "rdma_en3", "rxe0"
  uint8_t port = 1;    ///< the active port
  int gid_index = 0;
  ibv_gid gid{};
  uint16_t lid = 0;
  ibv_mtu mtu = IBV_MTU_1024;
  Mode mode = Mode::kUc;   ///< what this port uses (TBCOLL_IB_MODE, or what the device showed it has for auto)
  bool auto_mode = false;  ///< mode was chosen automatically: a peer with less is met in UC
  int post_batch = 16;     ///< work requests posted per ibv_post_send call at most (one doorbell each)
  size_t slot_bytes = 512 * 1024;  ///< the bulk slot size this end offers (wire::slot_bytes_for, a knob)
  bool payload_sum = false;        ///< sum every payload (TBCOLL_IB_PAYLOAD_SUM): a debugging aid
  /// Whether it offers noted bulk slots and sends registered memory zero-copy: kZeroCopyOff, kZeroCopyOn, or
  /// kZeroCopyOnRc (TBCOLL_IB_ZERO_COPY=auto off librdma: on RC links only, where no slot can be lost; on UC a
  /// zero-copy slot's sum costs a pass over it on each side, more than the copy it saves, measured on the fake).
  int zero_copy = 0;
  bool apple = false;              ///< Apple's Thunderbolt stack (its registration rules apply)
};

constexpr int kZeroCopyOff = 0, kZeroCopyOn = 1, kZeroCopyOnRc = 2;

class Endpoint;
struct Operation;

/// A zero-copy slot the connection is to post (Endpoint::fill_piece): a whole slot of the message from source (on
/// a wire::kZeroCopyAlign boundary), in the registration keyed lkey; op is held until the slot's send completes.
struct ZeroCopySlot {
  const uint8_t* source = nullptr;
  uint32_t lkey = 0;
  uint32_t bytes = 0;
  std::shared_ptr<Operation> op;
};

/// What fill_piece produced.
enum class Piece { kNone, kCopied, kZeroCopy };

class Connection {
 public:
  static constexpr int kSmallDepth = 32;  ///< small receives posted (Apple: more than ~32 fails on some versions)
  /// The fewest small receives a connection works with, where the device grants a shorter queue than kSmallDepth
  /// (credits go back every depth / 2 frames): below it, the connection is refused naming the granted depths.
  static constexpr int kMinSmallDepth = 8;
  static constexpr int kMaxPostBatch = 32;

  /// Creates the queue pairs (INIT, of type mode; the bulk lane's only with `bulk`) and their registered buffers.
  /// The link has a bulk lane when both ends made one. Throws IoError naming the verb and the error.
  Connection(const LocalPort& local, Mode mode, std::string peer_key, int side_channel, bool bulk = true);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// This end's half of the handshake (queue pair numbers, GID, depths, slot size...).
  wire::Hello hello(const std::string& key) const;
  /// Moves both queue pairs to RTR and RTS towards the peer's hello, posts the receives, and tells the peer (side
  /// channel) it may send; returns once the peer said the same. Throws IoError with a hint (no IPv4 GID, ...).
  void establish(const wire::Hello& peer, Deadline deadline, const std::atomic<bool>* cancelled);

  const std::string& peer_key() const { return peer_key_; }
  const std::string& device() const { return local_.device; }
  /// The protection domain its buffers and the caller's registrations (registry.h) on this device belong to.
  const ibv_pd* pd() const { return local_.pd; }
  bool payload_sum() const { return local_.payload_sum; }
  Mode mode() const { return mode_; }
  /// Whether the link has a bulk lane, the agreed slot size and a copied slot's payload (0 without one; valid once
  /// established).
  bool bulk() const { return bulk_; }
  size_t slot_bytes() const { return bulk_ ? slot_bytes_ : 0; }
  size_t slot_payload() const { return bulk_ ? slot_bytes_ - sizeof(wire::Header) : 0; }
  /// Whether its bulk slots go without a header, each with a note on the small lane (wire.h: both ends offered
  /// zero-copy): only such a link sends from the caller's registered memory.
  bool noted() const { return noted_; }
  bool offers_zero_copy() const {
    return local_.zero_copy == kZeroCopyOn || (local_.zero_copy == kZeroCopyOnRc && mode_ == Mode::kRc);
  }
  /// Data frames and slots, and payload bytes, sent on this connection so far (every communicator's). Any thread.
  uint64_t frames_sent() const { return frames_sent_.load(std::memory_order_relaxed); }
  uint64_t slots_sent() const { return slots_sent_.load(std::memory_order_relaxed); }
  uint64_t payload_sent() const { return payload_sent_.load(std::memory_order_relaxed); }
  /// Of slots_sent(), those sent zero-copy from the caller's registered memory.
  uint64_t zero_copy_slots_sent() const { return zero_copy_sent_.load(std::memory_order_relaxed); }
  /// False once the peer is gone or a frame was lost; then every request on it fails.
  bool alive() const { return failure_.empty(); }

  /// Routes frames of comm_id to endpoint, for which this connection is rail `rail` (frames that came before go
  /// to it now). Detach before destroying it.
  void attach(uint64_t comm_id, Endpoint* endpoint, int rail);
  void detach(uint64_t comm_id);
  /// An endpoint (for which this connection is rail `rail`) with something to send on the lanes in `lanes` (bit
  /// per wire::Lane).
  void want_to_send(Endpoint* endpoint, int rail, unsigned lanes);
  /// Tells the peer that communicator comm_id was aborted here (side channel). Never throws.
  void notify_abort(uint64_t comm_id);

  /// Polls completions, routes arrived frames, posts sends and credits. Throws IoError once the connection failed
  /// (naming why). Caller holds no lock. Returns whether anything moved (a completion came).
  bool progress();
  /// Counts the polls that found completions (a waiter spins while it keeps changing). Any thread.
  uint64_t traffic() const { return traffic_.load(std::memory_order_relaxed); }

  std::mutex& mutex() { return mutex_; }

 private:
  struct Lane;
  void create_lane(Lane& lane, size_t slot_bytes, int depth, uint8_t* memory);
  void release();
  void connect_lane(Lane& lane, uint32_t dest_qpn, const wire::Hello& peer, const std::string& who);
  bool progress_locked();
  bool poll_locked();
  void on_received(int lane, int slot, uint32_t bytes);
  /// A slot of a noted bulk lane (wire.h) in receive `slot`: delivered once its note came (now, or on_note), as
  /// the note says (a zero-copy slot, or a copied one with its header).
  void on_noted_slot(int slot);
  void on_note(const wire::Header& header, const uint8_t* payload);
  /// Delivers a noted slot (in receive `slot`) as its note says: a copied slot's header checked against it, a
  /// zero-copy slot's sum; posts the receive again.
  void place_noted_slot(const wire::Header& note_header, const wire::SlotNote& note, int slot);
  /// Gives a data piece to its communicator's endpoint, or keeps it for when the communicator attaches.
  void deliver_locked(const wire::Header& header, const uint8_t* payload);
  /// Posts a noted slot from send slot `slot`'s place, and its note on the small lane: the slot the endpoint filled
  /// (header at its start, sealed here), or a zero-copy slot from the caller's memory (the place then only counts
  /// the slot in flight; header says what the note's does).
  void post_noted_slot(int slot, wire::Header* header, ZeroCopySlot* zero_copy);
  void pump_sends_locked();
  void pump_lane_locked(int lane);
  /// With TBCOLL_IB_PAYLOAD_SUM: marks the frame summed and sums its payload (header->payload bytes at payload).
  void sum_if_asked(wire::Header* header, const uint8_t* payload) const;
  void return_credits_locked();
  /// Seals the frame or slot `slot` of `lane` (its header, at its start, and payload already in place) and adds it
  /// to the lane's batch of work requests, posted when full (LocalPort::post_batch) or by flush_locked().
  void post_piece(int lane, int slot, wire::Header* header);
  /// Adds a SEND of [address, address + length) in lkey's registration to the lane's batch, posted when full.
  void batch_send(int lane, int slot, const uint8_t* address, size_t length, uint32_t lkey);
  void flush_locked(int lane);
  void post_recv(int lane, int slot);
  void check_side_channel_locked();
  void on_notice(const wire::Notice& notice);
  /// Tells the peer how many frames this end has posted (UC loss detection); asks for its counts if `ask`.
  void send_counts_locked(bool ask);
  void check_loss_locked(Clock::time_point now);
  [[noreturn]] void fail_locked(const std::string& why);
  struct Attached {
    uint64_t comm_id = 0;
    Endpoint* endpoint = nullptr;
    int rail = 0;
  };
  Attached* endpoint_of(uint64_t comm_id);

  // One queue pair and its buffers: receives 0..depth-1, then send slots depth..2*depth-1, `stride` bytes apart.
  struct Lane {
    ibv_qp* qp = nullptr;
    size_t stride = 0;      // this end's slot size (what the buffers were laid out for)
    size_t slot_bytes = 0;  // the receives' and sends' size: the small lane's frames, the bulk lane's agreed slots
    int depth = 0;          // receives posted here, and send slots
    uint8_t* memory = nullptr;
    uint32_t psn = 0;
    uint32_t send_seq = 0, recv_seq = 0;
    int credits = 0;        // receives the peer has posted for us that we have not consumed
    uint32_t owed = 0;      // receives we reposted and not yet reported to the peer
    uint64_t reported = 0;  // credits reported to the peer in all
    uint64_t frames_in = 0;
    uint64_t posted = 0;  // frames posted to the peer in all (data and credit)
    int peer_depth = 0;
    std::vector<int> free_send_slots;
    std::deque<std::pair<Endpoint*, int>> senders;  // with their rail on this connection
    ibv_send_wr batch[kMaxPostBatch] = {};
    ibv_sge batch_sge[kMaxPostBatch] = {};
    int batched = 0;
    uint64_t peer_posted = 0;            // a count the peer told us of that had not all arrived (0: none)
    Clock::time_point peer_posted_at{};  // when it told us
    uint8_t* slot(int index) const { return memory + static_cast<size_t>(index) * stride; }
  };

  LocalPort local_;
  Mode mode_;
  std::string peer_key_;
  int side_channel_;
  size_t slot_bytes_ = 0;
  int bulk_depth_ = 0;
  bool bulk_ = true;
  bool noted_ = false;
  ibv_cq* cq_ = nullptr;
  Lane lanes_[wire::kLanes];
  RegisteredMemory memory_;  // the small lane's frames, then the bulk lane's slots
  ibv_mr* mr_ = nullptr;
  uint8_t side_buffer_[2 * sizeof(wire::Notice)] = {};  // notices read from the side channel, not yet whole
  size_t side_bytes_ = 0;

  std::mutex mutex_;
  std::string failure_;  // set once: why the connection is dead
  std::vector<Attached> endpoints_;  // a handful: a world and its splits
  std::map<uint64_t, std::deque<std::vector<uint8_t>>> early_;  // frames of communicators not attached yet
  std::map<uint64_t, std::string> aborted_;                     // comm ids the peer aborted
  // Zero-copy slots in flight, by their send slot's place: the send they belong to, held until they were sent.
  struct Ticket {
    uint64_t comm_id = 0;
    std::shared_ptr<Operation> op;
  };
  std::vector<Ticket> tickets_;
  // Noted slots received before their note (bulk sequence number -> receive slot, not posted again yet), and notes
  // received before their slot.
  std::map<uint32_t, int> held_slots_;
  std::map<uint32_t, std::pair<wire::Header, wire::SlotNote>> notes_;  // the note frame's header, and the note
  std::atomic<uint64_t> frames_sent_{0};
  std::atomic<uint64_t> slots_sent_{0};
  std::atomic<uint64_t> payload_sent_{0};
  std::atomic<uint64_t> zero_copy_sent_{0};
  Clock::time_point next_side_check_{};
  Clock::time_point gone_at_{};  // when the side channel closed; zero while the peer is there
  Clock::time_point last_frame_at_{};  // these: platform::coarse_now(), they count milliseconds
  bool frames_came_ = false;           // a frame or slot arrived in this progress_locked() call
  std::atomic<uint64_t> traffic_{0};  // polls that found completions
  Clock::time_point next_probe_{};
};

}  // namespace tbcoll::ibverbs
