#include "transports/ibverbs/connection.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include <fmt/format.h>

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

std::string errno_text(int error) { return fmt::format("errno {} ({})", error, std::strerror(error)); }

}  // namespace

Mode pair_mode(Mode local, bool local_auto, Mode peer, bool peer_auto, const std::string& who) {
  if (local == peer) return local;
  if (local_auto || peer_auto) return Mode::kUc;
  throw IoError(fmt::format("{}: the peer uses mode {}, this rank {} (set TBCOLL_IB_MODE alike on every rank, or "
                            "auto)",
                            who, mode_name(peer), mode_name(local)));
}

Connection::Connection(const LocalPort& local, Mode mode, std::string peer_key, int side_channel)
    : local_(local), mode_(mode), peer_key_(std::move(peer_key)), side_channel_(side_channel) {
  const VerbsApi& v = *local_.verbs;
  auto cleanup = [&] {
    if (qp_ != nullptr) v.destroy_qp(qp_);
    if (cq_ != nullptr) v.destroy_cq(cq_);
  };
  cq_ = v.create_cq(local_.context, kRecvDepth + kSendDepth + 8, nullptr, nullptr, 0);
  if (cq_ == nullptr) {
    throw IoError(fmt::format("[ibverbs] {}", hints::describe(hints::Verb::kCreateCq, errno, {local_.device})));
  }
  ibv_qp_init_attr init{};
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.qp_type = mode_ == Mode::kRc ? IBV_QPT_RC : IBV_QPT_UC;
  init.cap.max_send_wr = kSendDepth;
  init.cap.max_recv_wr = kRecvDepth;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  qp_ = v.create_qp(local_.pd, &init);
  if (qp_ == nullptr) {
    const int error = errno;
    cleanup();
    throw IoError(fmt::format("[ibverbs] {} ({} queue pair)",
                              hints::describe(hints::Verb::kCreateQp, error, {local_.device, mode_ == Mode::kRc}),
                              mode_name(mode_)));
  }
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = local_.port;
  attr.qp_access_flags = kAccessFlags;
  const int init_result = v.modify_qp(qp_, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (init_result != 0) {
    cleanup();
    throw IoError(fmt::format("[ibverbs] {}", hints::describe(hints::Verb::kModifyQpInit, error_of(init_result),
                                                              {local_.device})));
  }
  memory_ = RegisteredMemory(static_cast<size_t>(kRecvDepth + kSendDepth) * wire::kFrameBytes);
  frames_ = memory_.data();
  const size_t bytes = memory_.size();
  errno = 0;
  mr_ = v.reg_mr(local_.pd, frames_, bytes, kAccessFlags);
  if (mr_ == nullptr) {
    const int error = errno;
    cleanup();
    throw IoError(fmt::format("[ibverbs] {} ({} B)", hints::describe(hints::Verb::kRegMr, error, {local_.device}),
                              bytes));
  }
  for (int slot = kRecvDepth + kSendDepth - 1; slot >= kRecvDepth; --slot) free_send_slots_.push_back(slot);
  psn_ = std::random_device()() & 0xffffffu;
}

Connection::~Connection() {
  const VerbsApi& v = *local_.verbs;
  if (qp_ != nullptr) v.destroy_qp(qp_);
  if (cq_ != nullptr) v.destroy_cq(cq_);
  if (mr_ != nullptr) v.dereg_mr(mr_);
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
  hello.qp_num = qp_->qp_num;
  hello.psn = psn_;
  hello.lid = local_.lid;
  hello.mtu = static_cast<uint8_t>(local_.mtu);
  hello.mode = static_cast<uint8_t>(static_cast<uint8_t>(local_.mode) | (local_.auto_mode ? 0x10 : 0));
  hello.recv_depth = kRecvDepth;
  return hello;
}

void Connection::establish(const wire::Hello& peer, Deadline deadline, const std::atomic<bool>* cancelled) {
  const VerbsApi& v = *local_.verbs;
  const std::string who = fmt::format("[ibverbs] {}: connection to {}", local_.device, peer_key_);
  const Mode agreed = pair_mode(local_.mode, local_.auto_mode, static_cast<Mode>(peer.mode & 0x0f),
                                (peer.mode & 0x10) != 0, who);
  if (agreed != mode_) {  // both ends compute it from the same facts: this is a bug, not a setting
    throw IoError(fmt::format("{}: this end made a {} queue pair, the pair's mode is {}", who, mode_name(mode_),
                              mode_name(agreed)));
  }
  if (peer.recv_depth < 2)
    throw IoError(fmt::format("{}: the peer posts {} receives (at least 2)", who, peer.recv_depth));
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = std::min(local_.mtu, static_cast<ibv_mtu>(peer.mtu));
  attr.dest_qp_num = peer.qp_num;
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
  const int rtr_result = v.modify_qp(qp_, &attr, mask);
  if (rtr_result != 0) {
    throw IoError(fmt::format("{}: {}", who,
                              hints::describe(hints::Verb::kModifyQpRtr, error_of(rtr_result),
                                              {local_.device, local_.mode == Mode::kRc})));
  }
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = psn_;
  mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (mode_ == Mode::kRc) {
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 1;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  const int rts_result = v.modify_qp(qp_, &attr, mask);
  if (rts_result != 0) {
    throw IoError(fmt::format("{}: {}", who,
                              hints::describe(hints::Verb::kModifyQpRts, error_of(rts_result),
                                              {local_.device, local_.mode == Mode::kRc})));
  }
  // Receives only once in RTS (Apple's rule), and all of them before the peer hears it may send.
  for (int slot = 0; slot < kRecvDepth; ++slot) post_recv(slot);
  credits_ = static_cast<int>(peer.recv_depth);
  peer_depth_ = static_cast<int>(peer.recv_depth);
  wire::Notice ready{static_cast<uint32_t>(wire::NoticeKind::kReady), 0, 0};
  net::write_all(side_channel_, &ready, sizeof(ready), deadline, who, cancelled);
  wire::Notice theirs{};
  net::read_exact(side_channel_, &theirs, sizeof(theirs), deadline, who, cancelled);
  if (theirs.kind != static_cast<uint32_t>(wire::NoticeKind::kReady)) {
    throw IoError(fmt::format("{}: the peer did not get ready (notice {})", who, theirs.kind));
  }
  last_frame_at_ = Clock::now();
}

void Connection::post_recv(int slot) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(frames_ + static_cast<size_t>(slot) * wire::kFrameBytes);
  sge.length = wire::kFrameBytes;
  sge.lkey = mr_->lkey;
  ibv_recv_wr wr{};
  wr.wr_id = static_cast<uint64_t>(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  const int result = local_.verbs->post_recv(qp_, &wr, &bad);
  if (result != 0) {
    fail_locked(fmt::format("[ibverbs] to {}: {}", peer_key_,
                            hints::describe(hints::Verb::kPostRecv, error_of(result), {local_.device})));
  }
}

void Connection::attach(uint64_t comm_id, Endpoint* endpoint, int rail) {
  std::lock_guard<std::mutex> lock(mutex_);
  endpoints_[comm_id] = Attached{endpoint, rail};
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
  auto it = endpoints_.find(comm_id);
  if (it == endpoints_.end()) return;
  Endpoint* leaving = it->second.endpoint;
  senders_.erase(std::remove_if(senders_.begin(), senders_.end(),
                                [leaving](const std::pair<Endpoint*, int>& sender) { return sender.first == leaving; }),
                 senders_.end());
  endpoints_.erase(it);
  aborted_.erase(comm_id);
}

void Connection::want_to_send(Endpoint* endpoint, int rail) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::pair<Endpoint*, int> sender{endpoint, rail};
  if (std::find(senders_.begin(), senders_.end(), sender) == senders_.end()) senders_.push_back(sender);
  if (!failure_.empty()) return;
  try {
    pump_sends_locked();  // small messages leave in this call
  } catch (const IoError&) {
    // Recorded in failure_: the request's test() reports it.
  }
}

void Connection::notify_abort(uint64_t comm_id) {
  wire::Notice notice{static_cast<uint32_t>(wire::NoticeKind::kAbort), 0, comm_id};
  std::lock_guard<std::mutex> lock(mutex_);
  if (side_channel_ < 0) return;
  // Best effort and never blocking: a notice is 16 bytes, far below any socket buffer.
  (void)!send(side_channel_, &notice, sizeof(notice), MSG_DONTWAIT | platform::send_flags());
}

void Connection::progress() {
  std::lock_guard<std::mutex> lock(mutex_);
  progress_locked();
}

void Connection::progress_locked() {
  if (!failure_.empty()) throw IoError(failure_);
  poll_locked();
  pump_sends_locked();
  const auto now = Clock::now();
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
}

void Connection::check_loss_locked(Clock::time_point now) {
  if (peer_posted_ != 0 && frames_in_ >= peer_posted_) peer_posted_ = 0;  // all came
  if (peer_posted_ != 0 && now - peer_posted_at_ >= kLossGrace) {
    fail_locked(
        fmt::format("[ibverbs] {}: frames from {} were lost (it posted {}, {} arrived): the link dropped "
                    "data, which UC queue pairs do not resend",
                    local_.device, peer_key_, peer_posted_, frames_in_));
  }
  if (now - last_frame_at_ >= kProbeAfter && now >= next_probe_) {
    next_probe_ = now + kProbeAfter;
    send_count_locked(/*ask=*/true);
  }
}

void Connection::send_count_locked(bool ask) {
  if (side_channel_ < 0) return;
  wire::Notice notice{static_cast<uint32_t>(wire::NoticeKind::kSent), ask ? 1u : 0u, posted_};
  // Never blocking: 16 bytes, at most one per kProbeAfter and one answer per probe of the peer.
  (void)!send(side_channel_, &notice, sizeof(notice), MSG_DONTWAIT | platform::send_flags());
}

void Connection::block(std::chrono::microseconds max_wait) {
  // Completions have no file descriptor here (Apple's stack offers no completion channel): a short sleep, after
  // which the caller polls again. Short, so a reply that comes just after the spin phase costs ~100 us, not a
  // scheduler tick; the side channel is read by progress() every few milliseconds.
  std::this_thread::sleep_for(std::min(max_wait, std::chrono::microseconds(100)));
}

void Connection::poll_locked() {
  ibv_wc completions[16];
  for (;;) {
    const int got = local_.verbs->poll_cq(cq_, 16, completions);
    if (got < 0) fail_locked(fmt::format("[ibverbs] {}: ibv_poll_cq failed ({})", local_.device, got));
    for (int i = 0; i < got; ++i) {
      const ibv_wc& wc = completions[i];
      const int slot = static_cast<int>(wc.wr_id);
      const bool receive = slot < kRecvDepth;
      if (wc.status != IBV_WC_SUCCESS) {
        fail_locked(fmt::format("[ibverbs] {}: {} with {} failed: {}", local_.device, receive ? "a receive" : "a send",
                                peer_key_, wc_status_name(wc.status)));
      }
      if (receive) {
        on_frame(slot, wc.byte_len);
      } else {
        free_send_slots_.push_back(slot);
      }
    }
    if (got < 16) return;
  }
}

void Connection::on_frame(int slot, uint32_t bytes) {
  const uint8_t* frame = frames_ + static_cast<size_t>(slot) * wire::kFrameBytes;
  wire::Header header;
  if (!wire::decode_frame(frame, bytes, &header)) {
    fail_locked(fmt::format("[ibverbs] {}: a damaged frame from {} ({} B): the link delivered corrupt data",
                            local_.device, peer_key_, bytes));
  }
  if (header.seq != recv_seq_) {
    fail_locked(
        fmt::format("[ibverbs] {}: frames from {} were lost (expected frame {}, got {}): the link dropped "
                    "data, which UC queue pairs do not resend",
                    local_.device, peer_key_, recv_seq_, header.seq));
  }
  ++recv_seq_;
  ++frames_in_;
  last_frame_at_ = Clock::now();
  credits_ += static_cast<int>(header.credits);
  if (header.kind == static_cast<uint8_t>(wire::FrameKind::kData)) {
    Attached* attached = endpoint_of(header.comm_id);
    if (attached != nullptr) {
      attached->endpoint->on_frame(attached->rail, header, frame + sizeof(header));
    } else {
      early_[header.comm_id].emplace_back(frame, frame + sizeof(header) + header.payload);
    }
  }
  post_recv(slot);
  ++owed_;
}

Connection::Attached* Connection::endpoint_of(uint64_t comm_id) {
  auto it = endpoints_.find(comm_id);
  return it == endpoints_.end() ? nullptr : &it->second;
}

void Connection::pump_sends_locked() {
  while (!senders_.empty() && credits_ >= 2 && !free_send_slots_.empty()) {
    const auto [endpoint, rail] = senders_.front();
    senders_.pop_front();
    const int slot = free_send_slots_.back();
    uint8_t* frame = frames_ + static_cast<size_t>(slot) * wire::kFrameBytes;
    wire::Header header;
    bool more = false;
    if (!endpoint->fill_frame(rail, &header, frame + sizeof(header), &more)) continue;
    free_send_slots_.pop_back();
    post_frame(slot, header);
    frames_sent_.fetch_add(1, std::memory_order_relaxed);
    payload_sent_.fetch_add(header.payload, std::memory_order_relaxed);
    // Round robin between the communicators that have something to send.
    if (more) senders_.emplace_back(endpoint, rail);
  }
  // Credits back to the peer when it has nothing to carry them, or may be running short.
  const uint64_t peer_credits = static_cast<uint64_t>(kRecvDepth) + reported_ - frames_in_;
  if (owed_ > 0 && credits_ >= 1 && !free_send_slots_.empty() &&
      (owed_ >= static_cast<uint32_t>(kRecvDepth / 2) || peer_credits <= 2)) {
    wire::Header header;
    header.kind = static_cast<uint8_t>(wire::FrameKind::kCredit);
    const int slot = free_send_slots_.back();
    free_send_slots_.pop_back();
    post_frame(slot, header);
  }
  flush_locked();
}

void Connection::post_frame(int slot, wire::Header header) {
  uint8_t* frame = frames_ + static_cast<size_t>(slot) * wire::kFrameBytes;
  header.seq = send_seq_++;
  ++posted_;
  header.credits = static_cast<uint16_t>(owed_);
  reported_ += owed_;
  owed_ = 0;
  header.payload_sum = wire::payload_sum(frame + sizeof(header), header.payload);
  wire::seal(header);
  std::memcpy(frame, &header, sizeof(header));
  ibv_sge& sge = batch_sge_[batched_];
  sge.addr = reinterpret_cast<uintptr_t>(frame);
  sge.length = static_cast<uint32_t>(sizeof(header) + header.payload);
  sge.lkey = mr_->lkey;
  ibv_send_wr& wr = batch_[batched_];
  wr = ibv_send_wr{};
  wr.wr_id = static_cast<uint64_t>(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (batched_ > 0) batch_[batched_ - 1].next = &wr;
  ++batched_;
  --credits_;
  if (batched_ >= std::min(local_.post_batch, kMaxPostBatch)) flush_locked();
}

void Connection::flush_locked() {
  if (batched_ == 0) return;
  ibv_send_wr* bad = nullptr;
  const int posted = batched_;
  batched_ = 0;
  const int result = local_.verbs->post_send(qp_, &batch_[0], &bad);
  if (result != 0) {
    fail_locked(fmt::format("[ibverbs] to {}: {} ({} frames)", peer_key_,
                            hints::describe(hints::Verb::kPostSend, error_of(result), {local_.device}), posted));
  }
}

void Connection::check_side_channel_locked() {
  for (;;) {
    const ssize_t got =
        recv(side_channel_, side_buffer_ + side_bytes_, sizeof(side_buffer_) - side_bytes_, MSG_DONTWAIT);
    // The peer left: give its last frames time to arrive (progress_locked fails after that). A reset is a close
    // with notices of ours still unread there (a probe it had no reason to answer), or a crash.
    if (got == 0 || (got < 0 && (errno == ECONNRESET || errno == EPIPE))) {
      if (gone_at_ == Clock::time_point{}) gone_at_ = Clock::now();
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
      if (notice.kind == static_cast<uint32_t>(wire::NoticeKind::kSent)) {
        // Frames the peer posted: every one is on the wire (its batch was flushed before it answered).
        if (notice.comm_id > frames_in_ && peer_posted_ == 0) {
          peer_posted_ = notice.comm_id;
          peer_posted_at_ = Clock::now();
        }
        if (notice.reserved == 1) send_count_locked(/*ask=*/false);
      }
      if (notice.kind == static_cast<uint32_t>(wire::NoticeKind::kAbort)) {
        const std::string why =
            fmt::format("[ibverbs] {}: the peer {} aborted the communicator", local_.device, peer_key_);
        aborted_[notice.comm_id] = why;
        if (Attached* attached = endpoint_of(notice.comm_id)) attached->endpoint->fail(why);
      }
    }
  }
}

void Connection::fail_locked(const std::string& why) {
  if (failure_.empty()) {
    failure_ = why;
    for (auto& [comm_id, attached] : endpoints_) attached.endpoint->fail(why);
  }
  throw IoError(failure_);
}

}  // namespace tbcoll::ibverbs
