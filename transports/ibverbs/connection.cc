#include "transports/ibverbs/connection.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <utility>

#include <fmt/format.h>

#include "common/log.h"
#include "common/net.h"
#include "platform/platform.h"
#include "transports/ibverbs/endpoint.h"
#include "transports/ibverbs/hints.h"

namespace tbcoll::ibverbs {
namespace {

constexpr auto kSideCheckEvery = std::chrono::milliseconds(2);
// How long frames may still arrive after the peer's side channel closed: its last messages race its exit.
constexpr auto kGoneGrace = std::chrono::milliseconds(100);
// UC: how long a polled connection waits with no frame arriving before the ends compare their counts, and how long
// frames the peer said it posted may take to arrive (microseconds on a real link; generous for emulated rxe under
// load) before they count as lost.
constexpr auto kProbeAfter = std::chrono::milliseconds(50);
constexpr auto kLossGrace = std::chrono::milliseconds(250);
constexpr int kPollBatch = 32;

// A work request's id: its lane, whether it is a send, and its slot.
constexpr uint64_t kSendBit = uint64_t{1} << 31;
uint64_t wr_id(int lane, bool send, int slot) {
  return (static_cast<uint64_t>(lane) << 32) | (send ? kSendBit : 0) | static_cast<uint64_t>(slot);
}

std::string errno_text(int error) { return fmt::format("errno {} ({})", error, std::strerror(error)); }

// Adds to a counter that only the connection's lock holder writes and any thread reads: a load and a store, no
// read-modify-write (an atomic add costs a locked instruction per frame).
void bump(std::atomic<uint64_t>& counter, uint64_t by) {
  counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

// Places a work request of `slot_bytes` takes in a queue counted in 4 KiB frames (Apple's).
uint32_t frames_of(size_t slot_bytes) { return static_cast<uint32_t>((slot_bytes + wire::kFrameBytes - 1) / wire::kFrameBytes); }

}  // namespace

Mode pair_mode(Mode local, bool local_auto, Mode peer, bool peer_auto, const std::string& who) {
  if (local == peer) return local;
  if (local_auto || peer_auto) return Mode::kUc;
  throw IoError(fmt::format("{}: the peer uses mode {}, this rank {} (set TBCOLL_IB_MODE alike on every rank, or "
                            "auto)",
                            who, mode_name(peer), mode_name(local)));
}

Connection::Connection(const LocalPort& local, Mode mode, std::string peer_key, int side_channel, bool bulk)
    : local_(local), mode_(mode), peer_key_(std::move(peer_key)), side_channel_(side_channel), bulk_(bulk) {
  const VerbsApi& v = *local_.verbs;
  slot_bytes_ = local_.slot_bytes;
  bulk_depth_ = bulk_ ? wire::slots_for(slot_bytes_) : 0;
  const size_t small_bytes = 2 * static_cast<size_t>(kSmallDepth) * wire::kFrameBytes;
  memory_ = RegisteredMemory(small_bytes + 2 * static_cast<size_t>(bulk_depth_) * slot_bytes_);
  errno = 0;
  cq_ = v.create_cq(local_.context, 2 * (kSmallDepth + bulk_depth_) + 8, nullptr, nullptr, 0);
  if (cq_ == nullptr) {
    throw IoError(fmt::format("[ibverbs] {}", hints::describe(hints::Verb::kCreateCq, errno, {local_.device})));
  }
  try {
    create_lane(lanes_[wire::kSmall], wire::kFrameBytes, kSmallDepth, memory_.data());
    if (bulk_) create_lane(lanes_[wire::kBulk], slot_bytes_, bulk_depth_, memory_.data() + small_bytes);
    bulk_depth_ = bulk_ ? lanes_[wire::kBulk].depth : 0;  // what the device granted
    errno = 0;
    mr_ = v.reg_mr(local_.pd, memory_.data(), memory_.size(), kAccessFlags);
    if (mr_ == nullptr) {
      throw IoError(fmt::format("[ibverbs] {} ({} B)", hints::describe(hints::Verb::kRegMr, errno, {local_.device}),
                                memory_.size()));
    }
  } catch (...) {
    release();
    throw;
  }
  tickets_.resize(2 * static_cast<size_t>(bulk_depth_));
  const uint32_t psn = std::random_device()() & 0xffffffu;
  for (Lane& lane : lanes_) lane.psn = psn;
}

void Connection::create_lane(Lane& lane, size_t slot_bytes, int depth, uint8_t* memory) {
  const VerbsApi& v = *local_.verbs;
  lane.stride = lane.slot_bytes = slot_bytes;
  lane.memory = memory;
  ibv_qp_init_attr init{};
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.qp_type = mode_ == Mode::kRc ? IBV_QPT_RC : IBV_QPT_UC;
  init.cap.max_send_wr = static_cast<uint32_t>(depth) * frames_of(slot_bytes);  // Apple counts frames
  init.cap.max_recv_wr = static_cast<uint32_t>(depth) * frames_of(slot_bytes);
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  errno = 0;
  lane.qp = v.create_qp(local_.pd, &init);
  if (lane.qp == nullptr) {
    throw IoError(fmt::format("[ibverbs] {} ({} queue pair)",
                              hints::describe(hints::Verb::kCreateQp, errno, {local_.device, mode_ == Mode::kRc}),
                              mode_name(mode_)));
  }
  // What the provider granted (written back into init.cap; 0: it did not say): a queue shorter than asked makes a
  // shallower lane (the hello announces its depth), one too short for the lane an error naming both.
  const uint32_t frames = frames_of(slot_bytes);
  const uint32_t asked = static_cast<uint32_t>(depth) * frames;
  const uint32_t send_wr = init.cap.max_send_wr != 0 ? init.cap.max_send_wr : asked;
  const uint32_t recv_wr = init.cap.max_recv_wr != 0 ? init.cap.max_recv_wr : asked;
  const int granted = static_cast<int>(std::min({send_wr, recv_wr, asked}) / frames);
  if (granted < depth) {
    const bool small = &lane == &lanes_[wire::kSmall];
    const int needed = small ? kMinSmallDepth : 1;
    if (granted < needed) {
      throw IoError(fmt::format(
          "[ibverbs] {}: ibv_create_qp granted max_send_wr {} and max_recv_wr {} for the {} lane, asked {}: below the "
          "{} {} of {} B it needs ({} work requests; Apple counts 4 KiB frames)",
          local_.device, send_wr, recv_wr, small ? "small" : "bulk", asked, needed, small ? "frames" : "slot",
          slot_bytes, static_cast<uint32_t>(needed) * frames));
    }
    log::info("[ibverbs] {}: the {} lane's queue pair holds {} of {} B (asked {}): the device granted {} send and {} "
              "receive work requests",
              local_.device, small ? "small" : "bulk", granted, slot_bytes, depth, send_wr, recv_wr);
    depth = granted;
  }
  lane.depth = depth;
  for (int slot = 2 * depth - 1; slot >= depth; --slot) lane.free_send_slots.push_back(slot);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = local_.port;
  attr.qp_access_flags = kAccessFlags;
  const int result = v.modify_qp(lane.qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (result != 0) {
    throw IoError(
        fmt::format("[ibverbs] {}", hints::describe(hints::Verb::kModifyQpInit, error_of(result), {local_.device})));
  }
}

void Connection::release() {
  const VerbsApi& v = *local_.verbs;
  // The queue pairs first (they may still write into the buffers), then the registration, then the CQ.
  for (Lane& lane : lanes_) {
    if (lane.qp != nullptr) v.destroy_qp(lane.qp);
    lane.qp = nullptr;
  }
  if (mr_ != nullptr) v.dereg_mr(mr_);
  mr_ = nullptr;
  if (cq_ != nullptr) v.destroy_cq(cq_);
  cq_ = nullptr;
}

Connection::~Connection() {
  release();
  if (side_channel_ >= 0) {
    // Notices still unread (the peer's loss probes) would make the close a reset: read them first.
    uint8_t unread[256];
    while (recv(side_channel_, unread, sizeof(unread), MSG_DONTWAIT) > 0) {
    }
    close(side_channel_);
  }
}

wire::Hello Connection::hello(const std::string& key) const {
  wire::Hello hello;
  std::strncpy(hello.key, key.c_str(), sizeof(hello.key) - 1);
  std::strncpy(hello.peer_key, peer_key_.c_str(), sizeof(hello.peer_key) - 1);
  std::memcpy(hello.gid, local_.gid.raw, sizeof(hello.gid));
  hello.qp_num = lanes_[wire::kSmall].qp->qp_num;
  hello.bulk_qp_num = bulk_ ? lanes_[wire::kBulk].qp->qp_num : 0;
  hello.psn = lanes_[wire::kSmall].psn;
  hello.lid = local_.lid;
  hello.mtu = static_cast<uint8_t>(local_.mtu);
  hello.mode = static_cast<uint8_t>(static_cast<uint8_t>(local_.mode) | (local_.auto_mode ? 0x10 : 0));
  hello.recv_depth = static_cast<uint32_t>(lanes_[wire::kSmall].depth);
  hello.bulk_depth = static_cast<uint32_t>(bulk_depth_);
  hello.slot_bytes = static_cast<uint32_t>(local_.slot_bytes);
  if (offers_zero_copy()) hello.flags |= wire::kHelloNotedBulk;
  return hello;
}

void Connection::connect_lane(Lane& lane, uint32_t dest_qpn, const wire::Hello& peer, const std::string& who) {
  const VerbsApi& v = *local_.verbs;
  const hints::Where where{local_.device, mode_ == Mode::kRc};
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = std::min(local_.mtu, static_cast<ibv_mtu>(peer.mtu));
  attr.dest_qp_num = dest_qpn;
  attr.rq_psn = peer.psn;
  attr.ah_attr.is_global = 1;
  std::memcpy(attr.ah_attr.grh.dgid.raw, peer.gid, sizeof(peer.gid));
  attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(local_.gid_index);
  attr.ah_attr.grh.hop_limit = 1;  // Thunderbolt cables and one RoCE subnet: no routers
  attr.ah_attr.dlid = peer.lid;
  attr.ah_attr.port_num = local_.port;
  int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  if (mode_ == Mode::kRc) {
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 12;
    mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  }
  int result = v.modify_qp(lane.qp, &attr, mask);
  if (result != 0) {
    throw IoError(fmt::format("{}: {}", who, hints::describe(hints::Verb::kModifyQpRtr, error_of(result), where)));
  }
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = lane.psn;
  mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (mode_ == Mode::kRc) {
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 1;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  result = v.modify_qp(lane.qp, &attr, mask);
  if (result != 0) {
    throw IoError(fmt::format("{}: {}", who, hints::describe(hints::Verb::kModifyQpRts, error_of(result), where)));
  }
}

void Connection::establish(const wire::Hello& peer, Deadline deadline, const std::atomic<bool>* cancelled) {
  const std::string who = fmt::format("[ibverbs] {}: connection to {}", local_.device, peer_key_);
  const Mode agreed = pair_mode(local_.mode, local_.auto_mode, static_cast<Mode>(peer.mode & 0x0f),
                                (peer.mode & 0x10) != 0, who);
  if (agreed != mode_) {  // both ends compute it from the same facts: this is a bug, not a setting
    throw IoError(fmt::format("{}: this end made a {} queue pair, the pair's mode is {}", who, mode_name(mode_),
                              mode_name(agreed)));
  }
  const bool peer_bulk = peer.bulk_qp_num != 0;
  if (peer.recv_depth < 2 || (peer_bulk && peer.bulk_depth < 1)) {
    throw IoError(fmt::format("{}: the peer posts {} frames and {} slots (at least 2, and 1)", who, peer.recv_depth,
                              peer.bulk_depth));
  }
  if (bulk_ && !peer_bulk) {  // the peer's device had no room for a second queue pair: frames only
    local_.verbs->destroy_qp(lanes_[wire::kBulk].qp);
    lanes_[wire::kBulk] = Lane{};
    bulk_ = false;
  }
  // Both ends take the smaller slot: a slot and its receive then span the same frames.
  slot_bytes_ = std::min<size_t>(slot_bytes_, peer.slot_bytes);
  noted_ = bulk_ && offers_zero_copy() && (peer.flags & wire::kHelloNotedBulk) != 0;
  lanes_[wire::kBulk].slot_bytes = slot_bytes_;
  connect_lane(lanes_[wire::kSmall], peer.qp_num, peer, who);
  if (bulk_) connect_lane(lanes_[wire::kBulk], peer.bulk_qp_num, peer, who);
  // Receives only once in RTS (Apple's rule), and all of them before the peer hears it may send.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int lane = 0; lane < (bulk_ ? wire::kLanes : 1); ++lane) {
      for (int slot = 0; slot < lanes_[lane].depth; ++slot) post_recv(lane, slot);
    }
  }
  lanes_[wire::kSmall].credits = lanes_[wire::kSmall].peer_depth = static_cast<int>(peer.recv_depth);
  if (bulk_) lanes_[wire::kBulk].credits = lanes_[wire::kBulk].peer_depth = static_cast<int>(peer.bulk_depth);
  wire::Notice ready{static_cast<uint32_t>(wire::NoticeKind::kReady), 0, 0, 0};
  net::write_all(side_channel_, &ready, sizeof(ready), deadline, who, cancelled);
  wire::Notice theirs{};
  net::read_exact(side_channel_, &theirs, sizeof(theirs), deadline, who, cancelled);
  if (theirs.kind != static_cast<uint32_t>(wire::NoticeKind::kReady)) {
    throw IoError(fmt::format("{}: the peer did not get ready (notice {})", who, theirs.kind));
  }
  last_frame_at_ = platform::coarse_now();
  log::info("[ibverbs] {}: link to {}: {}", local_.device, peer_key_,
            bulk_ ? fmt::format("4 KiB frames and {} KiB slots{}", slot_bytes_ >> 10,
                                noted_ ? " (noted: zero-copy from registered memory)" : "")
                  : std::string("4 KiB frames only (an end has no bulk lane: no room for a second queue pair, or slots off: "
                                "Apple before macOS 26.3, or TBCOLL_IB_SLOT_BYTES)"));
}

void Connection::post_recv(int lane_index, int slot) {
  Lane& lane = lanes_[lane_index];
  ibv_sge sge{reinterpret_cast<uintptr_t>(lane.slot(slot)), static_cast<uint32_t>(lane.slot_bytes), mr_->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id(lane_index, false, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  const int result = local_.verbs->post_recv(lane.qp, &wr, &bad);
  if (result != 0) {
    fail_locked(fmt::format("[ibverbs] to {}: {}", peer_key_,
                            hints::describe(hints::Verb::kPostRecv, error_of(result), {local_.device})));
  }
}

void Connection::attach(uint64_t comm_id, Endpoint* endpoint, int rail) {
  std::lock_guard<std::mutex> lock(mutex_);
  endpoints_.push_back(Attached{comm_id, endpoint, rail});
  auto early = early_.find(comm_id);
  if (early != early_.end()) {
    for (const std::vector<uint8_t>& frame : early->second) {
      wire::Header header;
      std::memcpy(&header, frame.data(), sizeof(header));
      endpoint->on_frame(rail, header, frame.data() + sizeof(header));
    }
    early_.erase(early);
  }
  auto aborted = aborted_.find(comm_id);
  if (aborted != aborted_.end()) endpoint->fail(aborted->second);
  if (!failure_.empty()) endpoint->fail(failure_);
}

void Connection::detach(uint64_t comm_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Attached* attached = endpoint_of(comm_id);
  if (attached == nullptr) return;
  Endpoint* leaving = attached->endpoint;
  for (Lane& lane : lanes_) {
    lane.senders.erase(std::remove_if(lane.senders.begin(), lane.senders.end(),
                                      [leaving](const std::pair<Endpoint*, int>& s) { return s.first == leaving; }),
                       lane.senders.end());
  }
  endpoints_.erase(endpoints_.begin() + (attached - endpoints_.data()));
  aborted_.erase(comm_id);
}

void Connection::want_to_send(Endpoint* endpoint, int rail, unsigned lanes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::pair<Endpoint*, int> sender{endpoint, rail};
  for (int lane = 0; lane < wire::kLanes; ++lane) {
    if ((lanes & (1u << lane)) == 0) continue;
    auto& senders = lanes_[lane].senders;
    if (std::find(senders.begin(), senders.end(), sender) == senders.end()) senders.push_back(sender);
  }
  if (!failure_.empty()) return;
  try {
    pump_sends_locked();  // small messages leave in this call
  } catch (const IoError&) {
    // Recorded in failure_: the request's test() reports it.
  }
}

void Connection::notify_abort(uint64_t comm_id) {
  wire::Notice notice{static_cast<uint32_t>(wire::NoticeKind::kAbort), 0, comm_id, 0};
  std::lock_guard<std::mutex> lock(mutex_);
  if (side_channel_ < 0) return;
  // Best effort and never blocking: a notice is 24 bytes, far below any socket buffer.
  (void)!send(side_channel_, &notice, sizeof(notice), MSG_DONTWAIT | platform::send_flags());
}

bool Connection::progress() {
  std::lock_guard<std::mutex> lock(mutex_);
  return progress_locked();
}

bool Connection::progress_locked() {
  if (!failure_.empty()) throw IoError(failure_);
  frames_came_ = false;
  const bool moved = poll_locked();
  pump_sends_locked();
  const auto now = platform::coarse_now();  // the checks below count milliseconds
  if (frames_came_) last_frame_at_ = now;
  if (now >= next_side_check_) {
    next_side_check_ = now + kSideCheckEvery;
    check_side_channel_locked();
  }
  if (mode_ == Mode::kUc) check_loss_locked(now);
  if (gone_at_ != Clock::time_point{} && now - gone_at_ >= kGoneGrace) {
    // Everything the peer sent before it left has had time to arrive: what is still awaited never will.
    fail_locked(
        fmt::format("[ibverbs] {}: the peer {} is gone (its side channel closed: the process exited, crashed "
                    "or was killed)",
                    local_.device, peer_key_));
  }
  return moved;
}

void Connection::check_loss_locked(Clock::time_point now) {
  for (Lane& lane : lanes_) {
    if (lane.peer_posted != 0 && lane.frames_in >= lane.peer_posted) lane.peer_posted = 0;  // all came
    if (lane.peer_posted != 0 && now - lane.peer_posted_at >= kLossGrace) {
      fail_locked(
          fmt::format("[ibverbs] {}: frames from {} were lost (it posted {}, {} arrived{}): the link dropped "
                      "data, which UC queue pairs do not resend",
                      local_.device, peer_key_, lane.peer_posted, lane.frames_in,
                      &lane == &lanes_[wire::kBulk] ? ", bulk slots" : ""));
    }
  }
  if (now - last_frame_at_ >= kProbeAfter && now >= next_probe_) {
    next_probe_ = now + kProbeAfter;
    send_counts_locked(/*ask=*/true);
  }
}

void Connection::send_counts_locked(bool ask) {
  if (side_channel_ < 0) return;
  wire::Notice notice{static_cast<uint32_t>(wire::NoticeKind::kSent), ask ? 1u : 0u, lanes_[wire::kSmall].posted,
                      lanes_[wire::kBulk].posted};
  // Never blocking: 24 bytes, at most one per kProbeAfter and one answer per probe of the peer.
  (void)!send(side_channel_, &notice, sizeof(notice), MSG_DONTWAIT | platform::send_flags());
}

bool Connection::poll_locked() {
  ibv_wc completions[kPollBatch];
  bool moved = false;
  for (;;) {
    const int got = local_.verbs->poll_cq(cq_, kPollBatch, completions);
    if (got < 0) fail_locked(fmt::format("[ibverbs] {}: ibv_poll_cq failed ({})", local_.device, got));
    for (int i = 0; i < got; ++i) {
      const ibv_wc& wc = completions[i];
      const int lane = static_cast<int>(wc.wr_id >> 32);
      const bool send = (wc.wr_id & kSendBit) != 0;
      const int slot = static_cast<int>(wc.wr_id & (kSendBit - 1));
      if (wc.status != IBV_WC_SUCCESS) {
        fail_locked(fmt::format("[ibverbs] {}: {} with {} failed: {}", local_.device, send ? "a send" : "a receive",
                                peer_key_, wc_status_name(wc.status)));
      }
      if (send) {
        lanes_[lane].free_send_slots.push_back(slot);
        if (lane == wire::kBulk && tickets_[static_cast<size_t>(slot)].op) {  // the adapter read the caller's bytes
          const Ticket ticket = std::exchange(tickets_[static_cast<size_t>(slot)], Ticket{});
          if (Attached* attached = endpoint_of(ticket.comm_id)) attached->endpoint->zero_copy_sent(ticket.op.get());
        }
      } else {
        on_received(lane, slot, wc.byte_len);
      }
    }
    if (got > 0) moved = true;
    if (got < kPollBatch) break;
  }
  if (moved) bump(traffic_, 1);
  return moved;
}

void Connection::on_received(int lane_index, int slot, uint32_t bytes) {
  Lane& lane = lanes_[lane_index];
  // byte_len is only a bound (Apple's provider may round it): what a frame holds, its header says.
  if (bytes > lane.slot_bytes) {
    fail_locked(fmt::format("[ibverbs] {}: a receive of {} B from {} says {} B arrived", local_.device,
                            lane.slot_bytes, peer_key_, bytes));
  }
  if (lane_index == wire::kBulk && noted_) {
    on_noted_slot(slot);
    return;
  }
  const uint8_t* frame = lane.slot(slot);
  wire::Header header;
  if (!wire::decode_frame(frame, lane.slot_bytes, &header)) {
    fail_locked(fmt::format("[ibverbs] {}: a damaged frame from {} ({} B): the link delivered corrupt data",
                            local_.device, peer_key_, bytes));
  }
  if (header.seq != lane.recv_seq) {
    fail_locked(
        fmt::format("[ibverbs] {}: frames from {} were lost (expected {} {}, got {}): the link dropped "
                    "data, which UC queue pairs do not resend",
                    local_.device, peer_key_, lane_index == wire::kBulk ? "slot" : "frame", lane.recv_seq, header.seq));
  }
  ++lane.recv_seq;
  ++lane.frames_in;
  frames_came_ = true;
  lanes_[wire::kSmall].credits += header.credits;
  lanes_[wire::kBulk].credits += header.bulk_credits;
  if (header.kind == static_cast<uint8_t>(wire::FrameKind::kData)) deliver_locked(header, frame + sizeof(header));
  if (header.kind == static_cast<uint8_t>(wire::FrameKind::kSlotNote)) on_note(header, frame + sizeof(header));
  post_recv(lane_index, slot);
  ++lane.owed;
}

void Connection::deliver_locked(const wire::Header& header, const uint8_t* payload) {
  Attached* attached = endpoint_of(header.comm_id);
  if (attached != nullptr) {
    attached->endpoint->on_frame(attached->rail, header, payload);
    return;
  }
  std::vector<uint8_t> frame(sizeof(header) + header.payload);
  std::memcpy(frame.data(), &header, sizeof(header));
  if (header.payload > 0) std::memcpy(frame.data() + sizeof(header), payload, header.payload);
  early_[header.comm_id].push_back(std::move(frame));
}

void Connection::on_noted_slot(int slot) {
  Lane& lane = lanes_[wire::kBulk];
  const uint32_t seq = lane.recv_seq++;  // a queue pair delivers in order: the slot's number is its place
  ++lane.frames_in;
  frames_came_ = true;
  auto note = notes_.find(seq);
  if (note == notes_.end()) {
    held_slots_.emplace(seq, slot);  // its note is still on the way
    return;
  }
  const auto [note_header, slot_note] = note->second;
  notes_.erase(note);
  place_noted_slot(note_header, slot_note, slot);
}

void Connection::place_noted_slot(const wire::Header& note_header, const wire::SlotNote& note, int slot) {
  const uint8_t* at = lanes_[wire::kBulk].slot(slot);
  // UC drops a slot without a word, and the next one then takes its place: a copied slot's header then has another
  // number than the note's, a zero-copy slot's bytes another sum.
  auto lost = [&] {
    fail_locked(fmt::format("[ibverbs] {}: slot {} from {} does not hold what its note says (message {}, offset {}): "
                            "the link lost or damaged a slot, which UC queue pairs do not resend",
                            local_.device, note.bulk_seq, peer_key_, note_header.message, note_header.offset));
  };
  wire::Header header;
  const uint8_t* payload = at;
  if ((note.flags & wire::kNoteHeadered) != 0) {
    if (!wire::decode_frame(at, lanes_[wire::kBulk].slot_bytes, &header) || header.seq != note.bulk_seq ||
        header.kind != static_cast<uint8_t>(wire::FrameKind::kData)) {
      lost();
    }
    lanes_[wire::kSmall].credits += header.credits;
    lanes_[wire::kBulk].credits += header.bulk_credits;
    payload = at + sizeof(wire::Header);
  } else {
    if ((note.flags & wire::kNoteSummed) != 0 && wire::payload_sum(at, note.bytes) != note.sum) lost();
    header = note_header;
    header.kind = static_cast<uint8_t>(wire::FrameKind::kData);
    header.payload = note.bytes;
    header.flags = static_cast<uint8_t>(header.flags & ~wire::kSummed);
  }
  deliver_locked(header, payload);
  post_recv(wire::kBulk, slot);
  ++lanes_[wire::kBulk].owed;
}

void Connection::on_note(const wire::Header& note_header, const uint8_t* payload) {
  Lane& bulk = lanes_[wire::kBulk];
  wire::SlotNote note;
  if (note_header.payload == sizeof(note)) std::memcpy(&note, payload, sizeof(note));
  // The slot it announces: arrived and held, or one of the next the peer may have in flight.
  const bool held = held_slots_.count(note.bulk_seq) != 0;
  if (!noted_ || note_header.payload != sizeof(note) || note.bytes > bulk.slot_bytes ||
      (!held && (note.bulk_seq - bulk.recv_seq >= static_cast<uint32_t>(bulk.depth) ||
                 notes_.count(note.bulk_seq) != 0))) {
    fail_locked(fmt::format("[ibverbs] {}: a note from {} names slot {} of {} B, which is not coming (expected "
                            "slot {} next)",
                            local_.device, peer_key_, note.bulk_seq, note.bytes, bulk.recv_seq));
  }
  if (!held) {
    notes_.emplace(note.bulk_seq, std::make_pair(note_header, note));
    return;
  }
  const int slot = held_slots_.at(note.bulk_seq);
  held_slots_.erase(note.bulk_seq);
  place_noted_slot(note_header, note, slot);
}

Connection::Attached* Connection::endpoint_of(uint64_t comm_id) {
  for (Attached& attached : endpoints_) {
    if (attached.comm_id == comm_id) return &attached;
  }
  return nullptr;
}

void Connection::sum_if_asked(wire::Header* header, const uint8_t* payload) const {
  if (!local_.payload_sum) return;
  header->flags |= wire::kSummed;
  header->payload_sum = wire::payload_sum(payload, header->payload);
}

void Connection::pump_lane_locked(int lane_index) {
  Lane& lane = lanes_[lane_index];
  const int reserve = lane_index == wire::kSmall ? 2 : 1;  // the small lane keeps one for a credit-only frame
  const size_t capacity = lane.slot_bytes - sizeof(wire::Header);
  const bool noted = lane_index == wire::kBulk && noted_;
  const Lane& small = lanes_[wire::kSmall];
  while (!lane.senders.empty() && lane.credits >= reserve && !lane.free_send_slots.empty()) {
    // A noted slot's note goes on the small lane as a data frame would (two credits, a frame): else later.
    if (noted && (small.credits < 2 || small.free_send_slots.empty())) break;
    const auto [endpoint, rail] = lane.senders.front();
    lane.senders.pop_front();
    const int slot = lane.free_send_slots.back();
    uint8_t* piece = lane.slot(slot);
    // The header is written where it goes, field by field, and sealed there (a header built elsewhere and copied
    // in as a block would be read back over its fields' narrower stores: a stall per frame). A zero-copy slot's
    // (unsent) says what its note will.
    wire::Header* header = new (piece) wire::Header();
    bool more = false;
    ZeroCopySlot zero_copy;
    const Piece made = endpoint->fill_piece(rail, lane_index, header, piece + sizeof(wire::Header), capacity, &more,
                                            &zero_copy);
    if (made == Piece::kNone) continue;
    lane.free_send_slots.pop_back();
    if (noted) {
      post_noted_slot(slot, header, made == Piece::kZeroCopy ? &zero_copy : nullptr);
    } else {
      sum_if_asked(header, piece + sizeof(wire::Header));
      bump(lane_index == wire::kBulk ? slots_sent_ : frames_sent_, 1);
      bump(payload_sent_, header->payload);
      post_piece(lane_index, slot, header);
    }
    // Round robin between the communicators that have something to send.
    if (more) lane.senders.emplace_back(endpoint, rail);
  }
}

void Connection::return_credits_locked() {
  // Credits back to the peer when nothing else carried them, and it may be running short or enough piled up.
  Lane& small = lanes_[wire::kSmall];
  Lane& bulk = lanes_[wire::kBulk];
  const uint64_t small_left = static_cast<uint64_t>(small.depth) + small.reported - small.frames_in;
  const uint64_t bulk_left = static_cast<uint64_t>(bulk.depth) + bulk.reported - bulk.frames_in;
  const bool small_due = small.owed > 0 && (small.owed >= static_cast<uint32_t>(small.depth / 2) || small_left <= 2);
  const bool bulk_due =
      bulk.owed > 0 && (bulk.owed >= static_cast<uint32_t>(std::max(1, bulk.depth / 2)) || bulk_left <= 1);
  if ((small_due || bulk_due) && small.credits >= 1 && !small.free_send_slots.empty()) {
    const int slot = small.free_send_slots.back();
    small.free_send_slots.pop_back();
    wire::Header* header = new (small.slot(slot)) wire::Header();
    header->kind = static_cast<uint8_t>(wire::FrameKind::kCredit);
    post_piece(wire::kSmall, slot, header);
  }
}

void Connection::pump_sends_locked() {
  pump_lane_locked(wire::kBulk);
  pump_lane_locked(wire::kSmall);
  return_credits_locked();
  flush_locked(wire::kBulk);
  flush_locked(wire::kSmall);
}

void Connection::post_piece(int lane_index, int slot, wire::Header* header) {
  Lane& lane = lanes_[lane_index];
  header->seq = lane.send_seq++;
  ++lane.posted;
  Lane& small = lanes_[wire::kSmall];
  Lane& bulk = lanes_[wire::kBulk];
  header->credits = static_cast<uint16_t>(small.owed);
  header->bulk_credits = static_cast<uint16_t>(bulk.owed);
  small.reported += small.owed;
  bulk.reported += bulk.owed;
  small.owed = bulk.owed = 0;
  wire::seal(*header);
  // A small frame goes as long as it is (one 4 KiB frame at most); a slot goes whole, so that it and its receive
  // span the same frames.
  const size_t length = lane_index == wire::kBulk ? lane.slot_bytes : sizeof(wire::Header) + header->payload;
  batch_send(lane_index, slot, lane.slot(slot), length, mr_->lkey);
}

void Connection::post_noted_slot(int slot, wire::Header* header, ZeroCopySlot* zero_copy) {
  Lane& bulk = lanes_[wire::kBulk];
  Lane& small = lanes_[wire::kSmall];
  wire::SlotNote note{bulk.send_seq, header->payload, 0, 0};
  bump(slots_sent_, 1);
  bump(payload_sent_, header->payload);
  if (zero_copy == nullptr) {  // a copied slot, with its header as on any bulk lane
    note.flags = wire::kNoteHeadered;
    sum_if_asked(header, bulk.slot(slot) + sizeof(wire::Header));
    post_piece(wire::kBulk, slot, header);
  } else {
    ++bulk.send_seq;
    ++bulk.posted;
    tickets_[static_cast<size_t>(slot)] = Ticket{header->comm_id, std::move(zero_copy->op)};
    if (zero_copy_slots_sent() == 0) {
      log::info("[ibverbs] {}: link to {}: sending zero-copy slots from registered memory", local_.device, peer_key_);
    }
    bump(zero_copy_sent_, 1);
    if (mode_ == Mode::kUc || local_.payload_sum) {  // on UC, how a slot that took a lost one's place shows
      note.sum = wire::payload_sum(zero_copy->source, note.bytes);
      note.flags = wire::kNoteSummed;
    }
    // A whole slot of the message: it and its receive span the same frames.
    batch_send(wire::kBulk, slot, zero_copy->source, bulk.slot_bytes, zero_copy->lkey);
  }
  const int note_slot = small.free_send_slots.back();
  small.free_send_slots.pop_back();
  uint8_t* frame = small.slot(note_slot);
  auto* note_header = new (frame) wire::Header(*header);
  note_header->kind = static_cast<uint8_t>(wire::FrameKind::kSlotNote);
  note_header->flags = static_cast<uint8_t>(note_header->flags & ~wire::kSummed);
  note_header->payload = sizeof(note);
  std::memcpy(frame + sizeof(wire::Header), &note, sizeof(note));
  sum_if_asked(note_header, frame + sizeof(wire::Header));
  bump(frames_sent_, 1);
  post_piece(wire::kSmall, note_slot, note_header);
}

void Connection::batch_send(int lane_index, int slot, const uint8_t* address, size_t length, uint32_t lkey) {
  Lane& lane = lanes_[lane_index];
  ibv_sge& sge = lane.batch_sge[lane.batched];
  sge.addr = reinterpret_cast<uintptr_t>(address);
  sge.length = static_cast<uint32_t>(length);
  sge.lkey = lkey;
  // The fields a SEND uses; the others stay zero from the batch's construction.
  ibv_send_wr& wr = lane.batch[lane.batched];
  wr.next = nullptr;
  wr.wr_id = wr_id(lane_index, true, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (lane.batched > 0) lane.batch[lane.batched - 1].next = &wr;
  ++lane.batched;
  --lane.credits;
  if (lane.batched >= std::min({local_.post_batch, kMaxPostBatch, lane.depth})) flush_locked(lane_index);
}

void Connection::flush_locked(int lane_index) {
  Lane& lane = lanes_[lane_index];
  if (lane.batched == 0) return;
  ibv_send_wr* bad = nullptr;
  const int posted = lane.batched;
  lane.batched = 0;
  const int result = local_.verbs->post_send(lane.qp, &lane.batch[0], &bad);
  if (result != 0) {
    fail_locked(fmt::format("[ibverbs] to {}: {} ({} {})", peer_key_,
                            hints::describe(hints::Verb::kPostSend, error_of(result), {local_.device}), posted,
                            lane_index == wire::kBulk ? "slots" : "frames"));
  }
}

void Connection::check_side_channel_locked() {
  for (;;) {
    const ssize_t got =
        recv(side_channel_, side_buffer_ + side_bytes_, sizeof(side_buffer_) - side_bytes_, MSG_DONTWAIT);
    // The peer left: give its last frames time to arrive (progress_locked fails after that). A reset is a close
    // with notices of ours still unread there (a probe it had no reason to answer), or a crash.
    if (got == 0 || (got < 0 && (errno == ECONNRESET || errno == EPIPE))) {
      if (gone_at_ == Clock::time_point{}) gone_at_ = platform::coarse_now();
      return;
    }
    if (got < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      fail_locked(
          fmt::format("[ibverbs] {}: the side channel to {} failed: {}", local_.device, peer_key_, errno_text(errno)));
    }
    side_bytes_ += static_cast<size_t>(got);
    while (side_bytes_ >= sizeof(wire::Notice)) {
      wire::Notice notice;
      std::memcpy(&notice, side_buffer_, sizeof(notice));
      std::memmove(side_buffer_, side_buffer_ + sizeof(notice), side_bytes_ - sizeof(notice));
      side_bytes_ -= sizeof(notice);
      on_notice(notice);
    }
  }
}

void Connection::on_notice(const wire::Notice& notice) {
  if (notice.kind == static_cast<uint32_t>(wire::NoticeKind::kSent)) {
    // Frames the peer posted: every one is on the wire (its batches were flushed before it answered).
    const uint64_t counts[wire::kLanes] = {notice.comm_id, notice.bulk};
    for (int lane = 0; lane < wire::kLanes; ++lane) {
      Lane& mine = lanes_[lane];
      if (counts[lane] > mine.frames_in && mine.peer_posted == 0) {
        mine.peer_posted = counts[lane];
        mine.peer_posted_at = platform::coarse_now();
      }
    }
    if (notice.reserved == 1) send_counts_locked(/*ask=*/false);
  }
  if (notice.kind == static_cast<uint32_t>(wire::NoticeKind::kAbort)) {
    const std::string why = fmt::format("[ibverbs] {}: the peer {} aborted the communicator", local_.device, peer_key_);
    aborted_[notice.comm_id] = why;
    if (Attached* attached = endpoint_of(notice.comm_id)) attached->endpoint->fail(why);
  }
}

void Connection::fail_locked(const std::string& why) {
  if (failure_.empty()) {
    failure_ = why;
    for (Attached& attached : endpoints_) attached.endpoint->fail(why);
  }
  throw IoError(failure_);
}

}  // namespace tbcoll::ibverbs
