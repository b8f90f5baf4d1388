// Plain verbs between two processes, without the transport's protocol: what tbcoll-rdma-check and tbcoll-perf's
// floors (floors.h) measure and verify with. Within Apple's subset in UC mode: UC queue pairs, IBV_WR_SEND with
// one SGE, receives posted only in RTS and before the peer may send (a barrier through the PeerExchange), every
// send and its receive of the same byte count (so the same number of 4 KiB frames), queue depths counted in
// frames, messages at most 16,773,120 bytes.
//
// Two queue pairs to the peer: "data" carries the measured messages; "credit" carries 64-byte credit messages
// of the bandwidth runs (a receiver returns receives it reposted, so a sender never sends into no receive: UC
// would drop it silently). Every phase posts exactly as many data receives as it will consume, so no receive of
// one phase's size is left for the next; a phase that loses a message fails (naming it) and breaks the link.
//
// Messages' bytes are checked, not their completions' byte_len, which Apple's stack rounds up to whole 4 KiB frames
// and which is not trusted beyond that; every SEND leaves from a 4 KiB-aligned address, as Apple's stack requires.
//
// Every phase is collective: both ranks call it in the same order; its outcome is agreed through the exchange,
// so both return the same result (or throw the same IoError). Waits are bounded by message_timeout_s.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "transports/ibverbs/memory.h"
#include "transports/ibverbs/mode.h"
#include "transports/ibverbs/probe.h"
#include "tools/rdma_diag/floors.h"
#include "transports/ibverbs/verbs.h"

namespace tbcoll::ibverbs {

/// Apple's largest message (4095 frames of 4 KiB).
constexpr size_t kAppleMaxMessageBytes = 16773120;

struct RawLinkOptions {
  int rank = 0;  ///< 0 or 1
  Mode mode = Mode::kUc;
  std::string device;  ///< this rank's device; "" = the one on a subnet the peer's ports share (subnets.h)
  double message_timeout_s = 10;
  size_t max_message_bytes = size_t{16} << 20;  ///< buffers are sized for this (clamped to the device's limits)
};

/// One step of the verified sweep.
struct SweepStep {
  size_t bytes = 0;
  bool ok = false;
  double seconds = 0;   ///< both directions at once, on rank 0
  std::string failure;  ///< what went wrong, on which rank, and the fix
};

struct ZeroCopyResult;  // zero_copy.h

struct SweepResult {
  bool ok = false;
  std::vector<SweepStep> steps;  ///< up to and including the first failure
  std::string failure;
};

class RawLink {
 public:
  /// Opens the device, creates both queue pairs, swaps their numbers and GIDs with the peer, moves them to RTS
  /// and posts the credit receives. Throws IoError naming the rank that failed and the fix (both ranks throw).
  /// verbs may be null (no library): why_no_verbs says why, and both ranks throw it, still in step.
  RawLink(const VerbsApi* verbs, const std::string& why_no_verbs, const RawLinkOptions& options, PeerExchange exchange);
  ~RawLink();
  RawLink(const RawLink&) = delete;
  RawLink& operator=(const RawLink&) = delete;

  const std::string& device() const { return device_; }
  const std::string& peer_device() const { return peer_device_; }
  int mtu_bytes() const;
  /// The largest message this link sends: the smaller of the option, both devices' max_msg_sz and Apple's.
  size_t max_message_bytes() const { return max_message_; }

  /// For each size, both ranks send one message of that size to the other at once into a receive of exactly
  /// that size, then check every byte (a pattern of the size and the sender). Stops at the first failure.
  SweepResult sweep(const std::vector<size_t>& sizes);
  /// One-way latency, median round trip / 2 over `round_trips` (after a tenth as many for warm-up), rank 0
  /// leading; bytes at most 4096. Throws IoError (lost message, error completion).
  double one_way_us(size_t bytes, int round_trips);
  /// GB/s of `messages` messages of `bytes` from rank 0 to rank 1 (both_ways: from each to the other at once;
  /// the slower direction's rate). Throws IoError.
  double bandwidth_gbps(size_t bytes, int messages, bool both_ways);
  /// The transport's zero-copy sends, with plain verbs (zero_copy.h says what is sent): SENDs of a slot's size
  /// straight from a separately registered "caller's" buffer, at 16 KiB-aligned offsets, both ways at once, every
  /// byte checked. Never throws: a failure, or a link that failed before, is in the result. Once per link.
  ZeroCopyResult zero_copy_sends();

 private:
  void choose_device(std::string* failure);
  void open_port();
  void setup();
  /// Swaps outcomes with the peer: `failure` ("" = fine) and a value; throws IoError naming the ranks that failed
  /// (and marks the link broken) unless both are fine; returns the peer's value.
  std::string agree(const std::string& what, const std::string& failure, const std::string& value = "");
  void check_usable(const char* what) const;
  /// mr: the registration `at` lies in (null: the link's own).
  void post_recv(ibv_qp* qp, uint8_t* at, size_t bytes, uint64_t wr_id, const ibv_mr* mr = nullptr);
  void post_send(ibv_qp* qp, const uint8_t* at, size_t bytes, uint64_t wr_id, const ibv_mr* mr = nullptr);
  /// Polls both CQs once; calls on_recv / on_send for each completion (throws IoError for an error status).
  template <typename OnRecv, typename OnSend>
  void poll(OnRecv on_recv, OnSend on_send);
  /// poll() for phases without credits: a credit receive (of an earlier phase) is reposted, credit sends skipped.
  void poll_data(const std::function<void(const ibv_wc&)>& on_recv, const std::function<void(const ibv_wc&)>& on_send);
  void send_credit(uint64_t posted, bool final);
  struct BandwidthRun;
  /// A bandwidth phase's messages until every one was sent, acknowledged and received (run.start, run.finished).
  void stream(BandwidthRun& run);
  void on_bandwidth_receive(BandwidthRun& run, const ibv_wc& wc);
  void release();
  // The zero-copy case's steps (zero_copy.cc): each returns this rank's failure, "" when fine.
  std::string prepare_zero_copy(size_t slot_bytes);
  std::string send_zero_copy(size_t slot_bytes);

  const VerbsApi* verbs_ = nullptr;
  RawLinkOptions options_;
  PeerExchange exchange_;
  std::string device_, peer_device_;
  std::shared_ptr<OpenDevice> opened_;  // holds context_ and pd_ (probe.h opened_device)
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* send_cq_ = nullptr;
  ibv_cq* recv_cq_ = nullptr;
  ibv_qp* data_qp_ = nullptr;
  ibv_qp* credit_qp_ = nullptr;
  ibv_mr* mr_ = nullptr;
  RegisteredMemory memory_;
  uint8_t* send_region_ = nullptr;    // region_bytes_
  uint8_t* recv_region_ = nullptr;    // region_bytes_
  uint8_t* credit_region_ = nullptr;  // credit receive and send slots
  // The zero-copy case's buffers, registered apart as a caller's would be and kept as long as the link: a receive
  // that a failed case left posted must not outlive its memory.
  RegisteredMemory caller_memory_, landing_memory_;
  ibv_mr* caller_mr_ = nullptr;
  ibv_mr* landing_mr_ = nullptr;
  size_t max_message_ = 0;
  size_t port_max_message_ = 0;  // the port's max_msg_sz, at most Apple's
  size_t region_bytes_ = 0;  // of the send and the receive region: max_message_, at least 16 frames, whole pages
  uint8_t port_ = 1;  // the device's active port
  int gid_index_ = 0;
  ibv_gid gid_{};
  uint16_t lid_ = 0;
  uint32_t psn_ = 0;
  ibv_mtu local_mtu_ = IBV_MTU_1024;
  ibv_mtu path_mtu_ = IBV_MTU_1024;
  uint64_t credit_sends_in_flight_ = 0;
  uint64_t next_credit_send_ = 0;
  uint32_t phase_ = 0;
  uint64_t idle_polls_ = 0;
  std::chrono::steady_clock::time_point idle_since_{};  // first empty poll of the current idle stretch
  bool broken_ = false;
  std::string broken_why_;
};

// ---- queue pair transitions with the attributes Apple's stack and rxe accept (no extra mask bits in UC) -----

struct QpPeer {
  uint32_t qp_num = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;
  ibv_gid gid{};
};
/// RESET -> INIT on `port`, pkey 0, kAccessFlags. Returns 0 or the errno.
int qp_to_init(const VerbsApi& verbs, ibv_qp* qp, uint8_t port);
/// INIT -> RTR towards peer (is_global 1, hop limit 1, sgid_index = gid_index). Returns 0 or the errno.
int qp_to_rtr(const VerbsApi& verbs, ibv_qp* qp, Mode mode, ibv_mtu mtu, uint8_t port, int gid_index,
              const QpPeer& peer);
/// RTR -> RTS. Returns 0 or the errno.
int qp_to_rts(const VerbsApi& verbs, ibv_qp* qp, Mode mode, uint32_t psn);

/// The first IPv4-mapped GID of `port` as this context sees it (on the tests' fake fabric every context is a port of
/// its own); false if there is none.
bool find_ipv4_gid(const VerbsApi& verbs, ibv_context* context, uint8_t port, int* index, ibv_gid* gid);

/// Bytes of an ibv_mtu (IBV_MTU_1024 -> 1024).
int mtu_bytes(ibv_mtu mtu);

/// The floors with these verbs (what system_floors does with the system's): both ranks call it.
Floors measure_floors(const VerbsApi* verbs, const std::string& why_no_verbs, const FloorOptions& options,
                      const PeerExchange& exchange);

}  // namespace tbcoll::ibverbs
