#include "tools/rdma_diag/raw_link.h"

#include <errno.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "tools/rdma_diag/pattern.h"
#include "transports/ibverbs/hints.h"
#include "transports/ibverbs/memory.h"
#include "transports/ibverbs/probe.h"
#include "transports/ibverbs/subnets.h"

namespace tbcoll::ibverbs {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kFrame = 4096;
constexpr int kMaxWr = 4095;  // Apple: at most 4095 work requests (4 KiB frames) at a time
// A credit message takes a 4 KiB frame of its own: Apple's stack sends only from 4 KiB-aligned addresses.
constexpr int kCreditSlot = 4096;
constexpr int kCreditBytes = 64;  // a credit receive
constexpr int kCreditRecvs = 8;
constexpr int kCreditSends = 32;
constexpr int kCqEntries = 512;
constexpr uint64_t kKindData = uint64_t{1} << 56;
constexpr uint64_t kKindCredit = uint64_t{2} << 56;
constexpr uint64_t kSlotMask = (uint64_t{1} << 56) - 1;
constexpr uint32_t kCreditMagic = 0x74626372;  // "tbcr"

struct CreditMessage {
  uint32_t magic = kCreditMagic;
  uint32_t phase = 0;
  uint64_t posted = 0;  ///< data receives the sender of this message has posted in this phase, in all
  uint32_t final = 0;   ///< it received every message of the phase
  uint32_t reserved = 0;
};

size_t frames(size_t bytes) { return std::max<size_t>(1, (bytes + kFrame - 1) / kFrame); }

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::string gid_hex(const ibv_gid& gid) {
  std::string out;
  for (uint8_t byte : gid.raw) out += fmt::format("{:02x}", byte);
  return out;
}

bool parse_gid(const std::string& hex, ibv_gid* gid) {
  if (hex.size() != 32) return false;
  for (int i = 0; i < 16; ++i) {
    unsigned value = 0;
    if (std::sscanf(hex.c_str() + 2 * i, "%2x", &value) != 1) return false;
    gid->raw[i] = static_cast<uint8_t>(value);
  }
  return true;
}

}  // namespace

int mtu_bytes(ibv_mtu mtu) {
  switch (mtu) {
    case IBV_MTU_256:
      return 256;
    case IBV_MTU_512:
      return 512;
    case IBV_MTU_1024:
      return 1024;
    case IBV_MTU_2048:
      return 2048;
    case IBV_MTU_4096:
      return 4096;
  }
  return 0;
}

bool find_ipv4_gid(const VerbsApi& verbs, ibv_context* context, uint8_t port, int* index, ibv_gid* gid) {
  ibv_port_attr attr{};
  if (verbs.query_port(context, port, &attr) != 0) return false;
  for (int i = 0; i < std::max(1, attr.gid_tbl_len); ++i) {
    ibv_gid entry{};
    if (verbs.query_gid(context, port, i, &entry) != 0) continue;
    bool mapped = entry.raw[10] == 0xff && entry.raw[11] == 0xff;
    for (int b = 0; b < 10; ++b) mapped = mapped && entry.raw[b] == 0;
    if (mapped) {
      *index = i;
      *gid = entry;
      return true;
    }
  }
  return false;
}

int qp_to_init(const VerbsApi& verbs, ibv_qp* qp, uint8_t port) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = port;
  attr.qp_access_flags = kAccessFlags;
  const int rc = verbs.modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  return rc == 0 ? 0 : error_of(rc);
}

int qp_to_rtr(const VerbsApi& verbs, ibv_qp* qp, Mode mode, ibv_mtu mtu, uint8_t port, int gid_index,
              const QpPeer& peer) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = mtu;
  attr.dest_qp_num = peer.qp_num;
  attr.rq_psn = peer.psn;
  attr.ah_attr.is_global = 1;
  attr.ah_attr.grh.dgid = peer.gid;
  attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(gid_index);
  attr.ah_attr.grh.hop_limit = 1;
  attr.ah_attr.dlid = peer.lid;
  attr.ah_attr.port_num = port;
  int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  if (mode == Mode::kRc) {
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 12;
    mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  }
  errno = 0;
  const int rc = verbs.modify_qp(qp, &attr, mask);
  return rc == 0 ? 0 : error_of(rc);
}

int qp_to_rts(const VerbsApi& verbs, ibv_qp* qp, Mode mode, uint32_t psn) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = psn;
  int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (mode == Mode::kRc) {
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 1;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  errno = 0;
  const int rc = verbs.modify_qp(qp, &attr, mask);
  return rc == 0 ? 0 : error_of(rc);
}

RawLink::RawLink(const VerbsApi* verbs, const std::string& why_no_verbs, const RawLinkOptions& options,
                 PeerExchange exchange)
    : verbs_(verbs), options_(options), exchange_(std::move(exchange)) {
  std::string failure;
  if (verbs_ == nullptr) failure = fmt::format("not available: {}", why_no_verbs);
  if (options_.device.empty()) choose_device(&failure);  // agreed: a failure here is both ranks'
  if (failure.empty()) {
    try {
      setup();
    } catch (const Error& error) {
      failure = error.what();
    }
  }
  // What the peer needs (or why this rank cannot take part).
  std::string mine;
  if (failure.empty()) {
    const uint32_t psn = std::random_device()() & 0xffffffu;
    mine = fmt::format("{} {} {} {} {} {} {} {}", data_qp_->qp_num, credit_qp_->qp_num, psn, lid_,
                       static_cast<int>(local_mtu_), static_cast<int>(options_.mode), max_message_, gid_hex(gid_)) +
           " " + device_;
    psn_ = psn;
  }
  std::string theirs;
  try {
    theirs = agree("connection set-up", failure, mine);
  } catch (...) {
    release();
    throw;
  }
  std::istringstream in(theirs);
  QpPeer data_peer, credit_peer;
  int peer_mtu = 0, peer_mode = 0;
  size_t peer_max = 0;
  std::string peer_gid;
  in >> data_peer.qp_num >> credit_peer.qp_num >> data_peer.psn >> data_peer.lid >> peer_mtu >> peer_mode >> peer_max >>
      peer_gid >> peer_device_;
  credit_peer.psn = data_peer.psn;
  credit_peer.lid = data_peer.lid;
  failure.clear();
  if (!in || !parse_gid(peer_gid, &data_peer.gid)) {
    failure = fmt::format("rank {}: the peer's set-up record is malformed ({:?})", options_.rank, theirs);
  } else if (peer_mode != static_cast<int>(options_.mode)) {
    failure = fmt::format("rank {} uses {} queue pairs, the peer {}: run both in one mode (--mode)", options_.rank,
                          mode_name(options_.mode), mode_name(static_cast<Mode>(peer_mode)));
  }
  if (failure.empty()) {
    credit_peer.gid = data_peer.gid;
    max_message_ = std::min(max_message_, peer_max);
    path_mtu_ = std::min(local_mtu_, static_cast<ibv_mtu>(peer_mtu));
    const hints::Where where{device_, options_.mode == Mode::kRc};
    for (auto [qp, peer] : {std::pair{data_qp_, data_peer}, std::pair{credit_qp_, credit_peer}}) {
      if (!failure.empty()) break;
      int error = qp_to_rtr(*verbs_, qp, options_.mode, path_mtu_, port_, gid_index_, peer);
      if (error != 0) {
        failure = fmt::format("rank {}: {}", options_.rank, hints::describe(hints::Verb::kModifyQpRtr, error, where));
        break;
      }
      error = qp_to_rts(*verbs_, qp, options_.mode, psn_);
      if (error != 0) {
        failure = fmt::format("rank {}: {}", options_.rank, hints::describe(hints::Verb::kModifyQpRts, error, where));
      }
    }
    // The credit receives, once in RTS (Apple's rule) and before the peer hears it may send.
    try {
      for (uint64_t slot = 0; failure.empty() && slot < kCreditRecvs; ++slot) {
        post_recv(credit_qp_, credit_region_ + slot * kCreditSlot, kCreditBytes, kKindCredit | slot);
      }
    } catch (const Error& error) {
      failure = error.what();
    }
  }
  try {
    agree("queue pairs to RTS", failure);
  } catch (...) {
    release();
    throw;
  }
}

RawLink::~RawLink() { release(); }

void RawLink::release() {
  if (verbs_ == nullptr) return;
  if (data_qp_ != nullptr) verbs_->destroy_qp(data_qp_);
  if (credit_qp_ != nullptr) verbs_->destroy_qp(credit_qp_);
  if (send_cq_ != nullptr) verbs_->destroy_cq(send_cq_);
  if (recv_cq_ != nullptr) verbs_->destroy_cq(recv_cq_);
  if (mr_ != nullptr) verbs_->dereg_mr(mr_);
  for (ibv_mr* mr : {caller_mr_, landing_mr_}) {
    if (mr != nullptr) verbs_->dereg_mr(mr);
  }
  opened_.reset();  // the process's opened device stays open (probe.h); a caller's own closes here
  data_qp_ = credit_qp_ = nullptr;
  send_cq_ = recv_cq_ = nullptr;
  mr_ = caller_mr_ = landing_mr_ = nullptr;
  pd_ = nullptr;
  context_ = nullptr;
}

int RawLink::mtu_bytes() const { return ibverbs::mtu_bytes(path_mtu_); }

void RawLink::open_port() {
  const VerbsApi& v = *verbs_;
  std::vector<std::string> allowed;
  if (!options_.device.empty()) allowed.push_back(options_.device);
  const Found found = probe(v, allowed);  // IoError with what is wrong and the fix
  device_ = found.name;
  gid_index_ = found.gid_index;
  gid_ = found.gid;
  lid_ = found.lid;
  port_ = found.port;
  local_mtu_ = found.mtu;
  const std::string who = fmt::format("rank {}", options_.rank);
  try {
    opened_ = opened_device(v, device_);  // the process's (probe.h), as the transport's ports use it
  } catch (const IoError& error) {
    throw IoError(fmt::format("{}: {}", who, error.what()));
  }
  context_ = opened_->context;
  if (!find_ipv4_gid(v, context_, port_, &gid_index_, &gid_)) {  // this context's own view of the port
    throw IoError(fmt::format("{}: {}: no IPv4-mapped GID: {}", who, device_, hints::no_ipv4_gid_fix(device_)));
  }
  ibv_port_attr port{};
  const int queried = v.query_port(context_, port_, &port);
  if (queried != 0) {
    throw IoError(fmt::format("{}: {}", who, hints::describe(hints::Verb::kQueryPort, error_of(queried), {device_})));
  }
  port_max_message_ =
      std::min<size_t>(kAppleMaxMessageBytes, port.max_msg_sz == 0 ? kAppleMaxMessageBytes : size_t{port.max_msg_sz});
  max_message_ = std::min<size_t>(options_.max_message_bytes, port_max_message_);
  max_message_ = std::max<size_t>(max_message_, kFrame);
}

void RawLink::setup() {
  open_port();
  const VerbsApi& v = *verbs_;
  const hints::Where where{device_, options_.mode == Mode::kRc};
  auto fail = [&](hints::Verb verb, int error) {
    throw IoError(fmt::format("rank {}: {}", options_.rank, hints::describe(verb, error, where)));
  };
  try {
    pd_ = opened_->protection_domain();
  } catch (const IoError& error) {
    throw IoError(fmt::format("rank {}: {}", options_.rank, error.what()));
  }
  send_cq_ = v.create_cq(context_, kCqEntries, nullptr, nullptr, 0);
  if (send_cq_ == nullptr) fail(hints::Verb::kCreateCq, errno);
  recv_cq_ = v.create_cq(context_, kCqEntries, nullptr, nullptr, 0);
  if (recv_cq_ == nullptr) fail(hints::Verb::kCreateCq, errno);
  auto create = [&](int depth) {
    ibv_qp_init_attr init{};
    init.send_cq = send_cq_;
    init.recv_cq = recv_cq_;
    init.qp_type = options_.mode == Mode::kRc ? IBV_QPT_RC : IBV_QPT_UC;
    init.cap.max_send_wr = static_cast<uint32_t>(depth);
    init.cap.max_recv_wr = static_cast<uint32_t>(depth);
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    errno = 0;
    ibv_qp* qp = v.create_qp(pd_, &init);
    if (qp == nullptr) fail(hints::Verb::kCreateQp, errno);
    const int error = qp_to_init(v, qp, port_);
    if (error != 0) {
      v.destroy_qp(qp);
      fail(hints::Verb::kModifyQpInit, error);
    }
    return qp;
  };
  data_qp_ = create(kMaxWr);
  credit_qp_ = create(kCreditSends + kCreditRecvs);
  // One registration: send region, receive region, credit slots; page aligned.
  const size_t credit_bytes = static_cast<size_t>(kCreditRecvs + kCreditSends) * kCreditSlot;
  region_bytes_ = whole_pages(std::max<size_t>(max_message_, 16 * kFrame));  // every region 16 KiB-aligned
  const size_t bytes = 2 * region_bytes_ + (credit_bytes + kFrame - 1) / kFrame * kFrame;
  memory_ = RegisteredMemory(bytes);
  send_region_ = memory_.data();
  recv_region_ = send_region_ + region_bytes_;
  credit_region_ = recv_region_ + region_bytes_;
  errno = 0;
  mr_ = v.reg_mr(pd_, send_region_, memory_.size(), kAccessFlags);
  if (mr_ == nullptr) fail(hints::Verb::kRegMr, errno);
}

namespace {

// This rank's usable ports as one line for the peer: "device ipv4 prefix apple|other;..." (or the failure).
std::string nets_line(const VerbsApi& verbs) {
  std::string out;
  for (const Found& found : probe_all(verbs, {})) {
    const int prefix = verbs.ipv4_prefix != nullptr ? verbs.ipv4_prefix(found.gid.raw + 12) : -1;
    out += fmt::format("{}{} {} {} {}", out.empty() ? "" : ";", found.name, ipv4_of(found.gid), prefix,
                       apple_device(verbs, found.name) ? "apple" : "other");
  }
  return out;
}

std::vector<Net> parse_nets(const std::string& line) {
  std::vector<Net> nets;
  std::istringstream entries(line);
  for (std::string entry; std::getline(entries, entry, ';');) {
    std::istringstream words(entry);
    Net net;
    std::string apple;
    if (words >> net.device >> net.ipv4 >> net.prefix >> apple) {
      net.apple = apple == "apple";
      nets.push_back(net);
    }
  }
  return nets;
}

}  // namespace

void RawLink::choose_device(std::string* failure) {
  // Both ranks swap their ports and pick, alike, the cable whose subnet both ends share (subnets.h).
  std::string mine;
  if (failure->empty()) {
    try {
      mine = nets_line(*verbs_);
    } catch (const Error& error) {
      *failure = error.what();
    }
  }
  // A plain swap, not agree(): a rank that cannot take part says so at the connection set-up, as always.
  const std::string reply = exchange_(failure->empty() ? "OK " + mine : "ERR");
  if (!failure->empty() || reply.rfind("OK ", 0) != 0) return;
  const std::string theirs = reply.substr(3);
  const std::vector<Net> rank0 = parse_nets(options_.rank == 0 ? mine : theirs);
  const std::vector<Net> rank1 = parse_nets(options_.rank == 0 ? theirs : mine);
  std::string why;
  const auto cables = cables_by_subnet(rank0, "rank 0", rank1, "rank 1", 1, &why);
  if (cables.empty()) {
    *failure = why + " (or name each rank's device: --device RANK0,RANK1)";
    return;
  }
  options_.device = options_.rank == 0 ? cables[0].first : cables[0].second;
}

std::string RawLink::agree(const std::string& what, const std::string& failure, const std::string& value) {
  const std::string theirs = exchange_(failure.empty() ? "OK " + value : "ERR " + failure);
  const bool peer_ok = theirs.rfind("OK ", 0) == 0;
  const std::string peer_text = theirs.size() >= 4 ? theirs.substr(theirs.rfind("OK ", 0) == 0 ? 3 : 4) : "";
  if (failure.empty() && peer_ok) return peer_text;
  const int peer = 1 - options_.rank;
  std::string why;
  if (!failure.empty()) why = fmt::format("rank {}: {}", options_.rank, failure);
  if (!peer_ok) why += fmt::format("{}rank {}: {}", why.empty() ? "" : "; ", peer, peer_text);
  // Rank 0's view first, so both ranks print the same text.
  if (options_.rank == 1 && !failure.empty() && !peer_ok) {
    why = fmt::format("rank 0: {}; rank 1: {}", peer_text, failure);
  }
  // A rank's own messages may already name it ("rank 1: ...").
  for (int r = 0; r < 2; ++r) {
    const std::string twice = fmt::format("rank {}: rank {}: ", r, r);
    for (size_t at; (at = why.find(twice)) != std::string::npos;) why.erase(at, twice.size() / 2);
  }
  broken_ = true;
  broken_why_ = fmt::format("{} failed: {}", what, why);
  throw IoError(broken_why_);
}

void RawLink::check_usable(const char* what) const {
  if (broken_) throw IoError(fmt::format("{} not run: the link failed before ({})", what, broken_why_));
}

void RawLink::post_recv(ibv_qp* qp, uint8_t* at, size_t bytes, uint64_t wr_id, const ibv_mr* mr) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(at), static_cast<uint32_t>(bytes), (mr != nullptr ? mr : mr_)->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  errno = 0;
  const int rc = verbs_->post_recv(qp, &wr, &bad);
  if (rc != 0) {
    throw IoError(fmt::format(
        "rank {}: {}", options_.rank,
        hints::describe(hints::Verb::kPostRecv, error_of(rc), {device_, options_.mode == Mode::kRc})));
  }
}

void RawLink::post_send(ibv_qp* qp, const uint8_t* at, size_t bytes, uint64_t wr_id, const ibv_mr* mr) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(at), static_cast<uint32_t>(bytes), (mr != nullptr ? mr : mr_)->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  errno = 0;
  const int rc = verbs_->post_send(qp, &wr, &bad);
  if (rc != 0) {
    throw IoError(fmt::format(
        "rank {}: {}", options_.rank,
        hints::describe(hints::Verb::kPostSend, error_of(rc), {device_, options_.mode == Mode::kRc})));
  }
}

template <typename OnRecv, typename OnSend>
void RawLink::poll(OnRecv on_recv, OnSend on_send) {
  ibv_wc recv_wc[16], send_wc[16];
  const int recvs = verbs_->poll_cq(recv_cq_, 16, recv_wc);
  const int sends = recvs < 0 ? 0 : verbs_->poll_cq(send_cq_, 16, send_wc);
  if (recvs < 0 || sends < 0) {
    throw IoError(fmt::format("rank {}: {}", options_.rank,
                              hints::describe(hints::Verb::kPollCq, 0, {device_, options_.mode == Mode::kRc})));
  }
  if (recvs == 0 && sends == 0) {
    // Spin while completions may come any microsecond (a Thunderbolt round trip is ~10 us); once nothing came for
    // 200 us, nap between polls, as the transport's waits do: where the "hardware" is the kernel (Soft-RoCE) or
    // ranks share cores, the work we wait for needs the CPU.
    if ((++idle_polls_ & 63) == 0) {
      const auto now = Clock::now();
      if (idle_since_ == Clock::time_point{}) {
        idle_since_ = now;
      } else if (now - idle_since_ > std::chrono::microseconds(200)) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      } else {
        std::this_thread::yield();
      }
    }
    return;
  }
  idle_since_ = Clock::time_point{};
  // An error completion: the cause rather than the flushes it brought about.
  const ibv_wc* failed = nullptr;
  bool failed_receive = false;
  for (int side = 0; side < 2; ++side) {
    const ibv_wc* wc = side == 0 ? recv_wc : send_wc;
    for (int i = 0; i < (side == 0 ? recvs : sends); ++i) {
      if (wc[i].status == IBV_WC_SUCCESS) continue;
      if (failed == nullptr || (failed->status == IBV_WC_WR_FLUSH_ERR && wc[i].status != IBV_WC_WR_FLUSH_ERR)) {
        failed = &wc[i];
        failed_receive = side == 0;
      }
    }
  }
  if (failed != nullptr) {
    throw IoError(fmt::format("rank {}: a {} on {} failed: {}", options_.rank, failed_receive ? "receive" : "send",
                              device_, hints::completion_fix(failed->status)));
  }
  for (int i = 0; i < recvs; ++i) on_recv(recv_wc[i]);
  for (int i = 0; i < sends; ++i) {
    if ((send_wc[i].wr_id & ~kSlotMask) == kKindCredit) --credit_sends_in_flight_;
    on_send(send_wc[i]);
  }
}

void RawLink::poll_data(const std::function<void(const ibv_wc&)>& on_recv,
                        const std::function<void(const ibv_wc&)>& on_send) {
  poll(
      [&](const ibv_wc& wc) {
        if ((wc.wr_id & ~kSlotMask) != kKindCredit) return on_recv(wc);
        const uint64_t slot = wc.wr_id & kSlotMask;  // a credit of an earlier phase: its receive goes back
        post_recv(credit_qp_, credit_region_ + slot * kCreditSlot, kCreditBytes, wc.wr_id);
      },
      [&](const ibv_wc& wc) {
        if ((wc.wr_id & ~kSlotMask) != kKindCredit) on_send(wc);
      });
}

void RawLink::send_credit(uint64_t posted, bool final) {
  const auto deadline = after(options_.message_timeout_s);
  while (credit_sends_in_flight_ >= static_cast<uint64_t>(kCreditSends)) {
    poll([](const ibv_wc&) {}, [](const ibv_wc&) {});
    if (credit_sends_in_flight_ >= static_cast<uint64_t>(kCreditSends) && Clock::now() > deadline) {
      throw IoError(fmt::format("rank {}: credit messages never completed", options_.rank));
    }
  }
  CreditMessage message;
  message.phase = phase_;
  message.posted = posted;
  message.final = final ? 1 : 0;
  const uint64_t slot = kCreditRecvs + next_credit_send_++ % kCreditSends;
  uint8_t* at = credit_region_ + slot * kCreditSlot;
  std::memcpy(at, &message, sizeof(message));
  post_send(credit_qp_, at, sizeof(message), kKindCredit | slot);
  ++credit_sends_in_flight_;
}

SweepResult RawLink::sweep(const std::vector<size_t>& sizes) {
  check_usable("send sweep");
  SweepResult result;
  const int peer = 1 - options_.rank;
  for (size_t requested : sizes) {
    SweepStep step;
    step.bytes = std::min(std::max<size_t>(requested, 1), max_message_);
    std::string failure;
    try {
      post_recv(data_qp_, recv_region_, step.bytes, kKindData);
      std::memset(recv_region_, 0, step.bytes);  // what arrives must be written by the peer's message
      fill_pattern(send_region_, step.bytes, step.bytes, options_.rank);
    } catch (const Error& error) {
      failure = error.what();
    }
    const auto start = Clock::now();
    try {
      agree(fmt::format("send sweep at {}", size_text(step.bytes)), failure);  // both receives posted
      bool received = false, sent = false;
      uint32_t byte_len = 0;
      post_send(data_qp_, send_region_, step.bytes, kKindData);
      const auto deadline = after(options_.message_timeout_s);
      while (failure.empty() && !(received && sent)) {
        poll([&](const ibv_wc& wc) { received = true, byte_len = wc.byte_len; }, [&](const ibv_wc&) { sent = true; });
        // A poll may block past the deadline (the fake's calls wait while the peer's post copies) and bring
        // both completions: only what is still missing then is a failure.
        if (!(received && sent) && Clock::now() > deadline) {
          failure = !received ? fmt::format(
                                    "rank {}: the {} message from rank {} did not arrive within {} s: lost "
                                    "(UC drops a message without any error: a flaky link, or a send that "
                                    "found no receive posted)",
                                    options_.rank, size_text(step.bytes), peer, options_.message_timeout_s)
                              : fmt::format("rank {}: the send of {} to rank {} never completed", options_.rank,
                                            size_text(step.bytes), peer);
        }
      }
      // Apple's byte_len is rounded up to whole 4 KiB frames, and not trusted beyond them: the bytes are checked.
      if (failure.empty() && byte_len > frames(step.bytes) * kFrame) {
        failure = fmt::format("rank {}: the {} message from rank {} arrived with {} B", options_.rank,
                              size_text(step.bytes), peer, byte_len);
      }
      if (failure.empty()) {
        const std::string damage = check_pattern(recv_region_, step.bytes, step.bytes, peer);
        if (!damage.empty()) {
          failure = fmt::format("rank {}: the {} message from rank {}: {}", options_.rank, size_text(step.bytes), peer,
                                damage);
        }
      }
    } catch (const Error& error) {
      if (broken_) {  // the set-up agreement failed: both know why
        step.failure = error.what();
        result.steps.push_back(step);
        result.failure = step.failure;
        return result;
      }
      failure = error.what();
    }
    step.seconds = seconds_since(start);
    try {
      agree(fmt::format("send sweep at {}", size_text(step.bytes)), failure);
      step.ok = true;
    } catch (const Error& error) {
      step.failure = error.what();
    }
    result.steps.push_back(step);
    if (!step.ok) {
      result.failure = step.failure;
      return result;
    }
  }
  result.ok = true;
  return result;
}

double RawLink::one_way_us(size_t bytes, int round_trips) {
  check_usable("latency");
  if (bytes < 1 || bytes > kFrame || round_trips < 1) {
    throw InvalidArgument(fmt::format("latency: {} B x {} round trips (1..4096 B, at least 1)", bytes, round_trips));
  }
  const int total = round_trips + std::max(1, round_trips / 10);
  const int depth = std::min(total, 16);
  std::string failure;
  try {
    for (int i = 0; i < depth; ++i) post_recv(data_qp_, recv_region_ + i * kFrame, bytes, kKindData | i);
  } catch (const Error& error) {
    failure = error.what();
  }
  agree("latency set-up", failure);
  std::vector<double> trips;
  const int peer = 1 - options_.rank;
  try {
    int posted = depth, outstanding_sends = 0;
    auto wait_one = [&] {
      bool got = false;
      auto deadline = after(options_.message_timeout_s);
      while (!got) {
        poll(
            [&](const ibv_wc& wc) {
              got = true;
              if (wc.byte_len > frames(bytes) * kFrame) {  // Apple's: rounded up to whole frames
                throw IoError(
                    fmt::format("rank {}: a {} B message arrived with {} B", options_.rank, bytes, wc.byte_len));
              }
              if (posted < total) {
                const uint64_t slot = wc.wr_id & kSlotMask;
                post_recv(data_qp_, recv_region_ + slot * kFrame, bytes, wc.wr_id);
                ++posted;
              }
            },
            [&](const ibv_wc&) { --outstanding_sends; });
        if (!got && Clock::now() > deadline) {
          throw IoError(
              fmt::format("rank {}: a {} B message from rank {} did not arrive within {} s: lost (UC "
                          "drops without an error)",
                          options_.rank, bytes, peer, options_.message_timeout_s));
        }
      }
    };
    const int warmup = total - round_trips;
    for (int i = 0; i < total; ++i) {
      if (options_.rank == 0) {
        const auto start = Clock::now();
        post_send(data_qp_, send_region_, bytes, kKindData);
        ++outstanding_sends;
        wait_one();
        if (i >= warmup) trips.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      } else {
        wait_one();
        post_send(data_qp_, send_region_, bytes, kKindData);
        ++outstanding_sends;
      }
    }
    const auto deadline = after(options_.message_timeout_s);
    while (outstanding_sends > 0) {
      poll([&](const ibv_wc&) { throw IoError("latency: an extra message arrived"); },
           [&](const ibv_wc&) { --outstanding_sends; });
      if (outstanding_sends > 0 && Clock::now() > deadline) {
        throw IoError(fmt::format("rank {}: sends never completed", options_.rank));
      }
    }
  } catch (const Error& error) {
    failure = error.what();
  }
  double median = 0;
  if (!trips.empty()) {
    std::nth_element(trips.begin(), trips.begin() + trips.size() / 2, trips.end());
    median = trips[trips.size() / 2];
  }
  // Rank 0's figure on both ranks, as text both parse alike.
  const std::string figure = fmt::format("{:.6f}", median / 2);
  const std::string theirs = agree("latency", failure, figure);
  return std::strtod((options_.rank == 0 ? figure : theirs).c_str(), nullptr);
}

// One bandwidth phase's state: what was sent, acknowledged, received and reposted.
struct RawLink::BandwidthRun {
  size_t bytes = 0;
  uint64_t total = 0, depth = 0;
  bool sender = false, receiver = false;
  uint64_t sent = 0, send_done = 0, peer_posted = 0, received = 0, posted = 0, reported = 0;
  bool peer_final = false;
  Clock::time_point start{}, finished{};
};

double RawLink::bandwidth_gbps(size_t bytes, int messages, bool both_ways) {
  check_usable("bandwidth");
  if (bytes < 1 || bytes > max_message_ || messages < 1) {
    throw InvalidArgument(
        fmt::format("bandwidth: {} B x {} messages (1..{} B, at least 1)", bytes, messages, max_message_));
  }
  BandwidthRun run;
  run.bytes = bytes;
  run.total = static_cast<uint64_t>(messages);
  // Receives of the phase: each spans frames(bytes) of the 4095-frame queue, and all fit the receive region.
  run.depth = std::min<uint64_t>({16, static_cast<uint64_t>(kMaxWr) / frames(bytes), region_bytes_ / bytes, run.total});
  run.sender = both_ways || options_.rank == 0;
  run.receiver = both_ways || options_.rank == 1;
  run.peer_posted = run.posted = run.reported = run.depth;
  ++phase_;
  std::string failure;
  try {
    for (uint64_t i = 0; run.receiver && i < run.depth; ++i) {
      post_recv(data_qp_, recv_region_ + i * bytes, bytes, kKindData | i);
    }
  } catch (const Error& error) {
    failure = error.what();
  }
  agree("bandwidth set-up", failure);
  double gbps = 0;
  try {
    stream(run);
    if (run.sender) {
      gbps = static_cast<double>(bytes) * static_cast<double>(run.total) /
             std::chrono::duration<double>(run.finished - run.start).count() / 1e9;
    }
  } catch (const Error& error) {
    failure = error.what();
  }
  const std::string figure = fmt::format("{:.6f}", gbps);
  const std::string theirs = agree(both_ways ? "bandwidth both ways" : "bandwidth", failure, figure);
  const double mine = std::strtod(figure.c_str(), nullptr), peer_gbps = std::strtod(theirs.c_str(), nullptr);
  if (!both_ways) return options_.rank == 0 ? mine : peer_gbps;
  return std::min(mine, peer_gbps);
}

void RawLink::on_bandwidth_receive(BandwidthRun& run, const ibv_wc& wc) {
  if ((wc.wr_id & ~kSlotMask) == kKindCredit) {
    CreditMessage message;
    const uint64_t slot = wc.wr_id & kSlotMask;
    std::memcpy(&message, credit_region_ + slot * kCreditSlot, sizeof(message));
    post_recv(credit_qp_, credit_region_ + slot * kCreditSlot, kCreditBytes, wc.wr_id);
    if (message.magic == kCreditMagic && message.phase == phase_) {
      run.peer_posted = std::max(run.peer_posted, message.posted);
      if (message.final != 0) run.peer_final = true;
    }
    return;
  }
  if (wc.byte_len > frames(run.bytes) * kFrame) {  // Apple's: rounded up to whole frames
    throw IoError(
        fmt::format("rank {}: a {} message arrived with {} B", options_.rank, size_text(run.bytes), wc.byte_len));
  }
  ++run.received;
  if (run.posted < run.total) {
    const uint64_t slot = wc.wr_id & kSlotMask;
    post_recv(data_qp_, recv_region_ + slot * run.bytes, run.bytes, wc.wr_id);
    ++run.posted;
  }
  if (run.posted - run.reported >= std::max<uint64_t>(1, run.depth / 2) || run.received == run.total) {
    send_credit(run.posted, run.received == run.total);
    run.reported = run.posted;
  }
}

void RawLink::stream(BandwidthRun& run) {
  run.start = Clock::now();
  auto deadline = after(options_.message_timeout_s);
  for (;;) {
    bool moved = false;
    while (run.sender && run.sent < run.total && run.sent < run.peer_posted && run.sent - run.send_done < run.depth) {
      post_send(data_qp_, send_region_, run.bytes, kKindData | (run.sent % run.depth));
      ++run.sent;
      moved = true;
    }
    poll(
        [&](const ibv_wc& wc) {
          moved = true;
          on_bandwidth_receive(run, wc);
        },
        [&](const ibv_wc& wc) {
          moved = true;
          if ((wc.wr_id & ~kSlotMask) == kKindData) ++run.send_done;
        });
    if (run.sender && run.peer_final && run.finished == Clock::time_point{}) run.finished = Clock::now();
    const bool sending_done =
        !run.sender || (run.sent == run.total && run.send_done == run.total && run.peer_final);
    const bool receiving_done = !run.receiver || run.received == run.total;
    if (sending_done && receiving_done && credit_sends_in_flight_ == 0) return;
    if (moved) {
      deadline = after(options_.message_timeout_s);
    } else if (Clock::now() > deadline) {
      throw IoError(fmt::format(
          "rank {}: the bandwidth run stalled for {} s (sent {} of {}, {} acknowledged, received {} of {}): a "
          "message or credit was lost (UC drops without an error)",
          options_.rank, options_.message_timeout_s, run.sent, run.total,
          run.peer_final ? run.total : run.peer_posted - run.depth, run.received, run.total));
    }
  }
}

Floors measure_floors(const VerbsApi* verbs, const std::string& why_no_verbs, const FloorOptions& options,
                      const PeerExchange& exchange) {
  Floors floors;
  floors.mode = options.mode == "rc" ? "rc" : "uc";
  try {
    RawLinkOptions link_options;
    link_options.rank = options.rank;
    link_options.mode = floors.mode == "rc" ? Mode::kRc : Mode::kUc;
    link_options.device = options.device;
    link_options.message_timeout_s = options.message_timeout_s;
    link_options.max_message_bytes = std::max<size_t>(options.bandwidth_bytes, kFrame);
    RawLink link(verbs, why_no_verbs, link_options, exchange);
    floors.device = link.device();
    floors.peer_device = link.peer_device();
    floors.mtu = link.mtu_bytes();
    floors.one_way_us = link.one_way_us(options.latency_bytes, options.round_trips);
    const size_t bytes = std::min(options.bandwidth_bytes, link.max_message_bytes());
    floors.one_qp_gbps = link.bandwidth_gbps(bytes, options.messages, false);
    floors.both_ways_gbps = link.bandwidth_gbps(bytes, options.messages, true);
    floors.measured = true;
  } catch (const Error& error) {
    floors.why_not = error.what();
  }
  return floors;
}

}  // namespace tbcoll::ibverbs
