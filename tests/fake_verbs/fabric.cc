// The wire of the fake fabric: where a send goes, what it finds there, and which completions it leaves.
#include "fake_verbs/fabric.h"

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>

namespace tbcoll::ibverbs::fake::detail {

std::unique_ptr<Fabric> make_fabric(const Options& options) {
  auto fabric = std::make_unique<Fabric>();
  fabric->options = options;
  fabric->counters.per_cable.assign(options.cables.size(), 0);
  for (int i = 0; i < options.devices; ++i) {
    auto device = std::make_unique<ibv_device>();
    device->node_type = IBV_NODE_CA;
    device->transport_type = IBV_TRANSPORT_IB;
    std::snprintf(device->name, sizeof(device->name), options.apple_strict ? "rdma_en%d" : "roce%d", i);
    std::snprintf(device->dev_name, sizeof(device->dev_name), "uverbs%d", i);
    fabric->devices.push_back(std::move(device));
  }
  return fabric;
}

bool is_zero(const ibv_gid& gid) {
  static const ibv_gid zero{};
  return std::memcmp(gid.raw, zero.raw, sizeof(gid.raw)) == 0;
}

namespace {

// A GID table: link-local at 0 (numbered by the port's serial), the IPv4-mapped one at options.ipv4_gid_index
// (ipv4 null: none), fd00:: elsewhere.
std::vector<ibv_gid> gid_table(const Options& options, int serial, const uint8_t* ipv4) {
  std::vector<ibv_gid> gids(std::max(2, options.ipv4_gid_index + 1));
  for (size_t i = 0; i < gids.size(); ++i) {
    uint8_t* raw = gids[i].raw;
    if (static_cast<int>(i) == options.ipv4_gid_index && ipv4 != nullptr) {
      raw[10] = 0xff, raw[11] = 0xff;
      std::memcpy(raw + 12, ipv4, 4);
    } else {
      raw[0] = i == 0 ? 0xfe : 0xfd, raw[1] = i == 0 ? 0x80 : 0x00;
      raw[8] = 0x02, raw[13] = static_cast<uint8_t>(i);
      raw[14] = static_cast<uint8_t>(serial >> 8), raw[15] = static_cast<uint8_t>(serial);
    }
  }
  return gids;
}

}  // namespace

Port* port_of(Fabric& fabric, int host, int device) {
  std::unique_ptr<Port>& port = fabric.ports[{host, device}];
  if (port) return port.get();
  port = std::make_unique<Port>();
  port->host = host;
  port->device = device;
  const int serial = fabric.next_port++;
  if (!fabric.cabled()) {  // switched: a network per device, rdma_en0's 10.9.0.0/16, rdma_en1's 10.10.0.0/16, ...
    const uint8_t ipv4[4] = {10, static_cast<uint8_t>(9 + device), static_cast<uint8_t>(serial >> 8),
                             static_cast<uint8_t>(serial)};
    port->gids = gid_table(fabric.options, serial, ipv4);
    return port.get();
  }
  const std::vector<Cable>& cables = fabric.options.cables;
  for (size_t c = 0; c < cables.size() && port->cable < 0; ++c) {
    if (cables[c].host_a == host && cables[c].device_a == device) port->cable = static_cast<int>(c), port->cable_end = 0;
    if (cables[c].host_b == host && cables[c].device_b == device) port->cable = static_cast<int>(c), port->cable_end = 1;
  }
  port->active = port->cable >= 0;
  const bool link_local = fabric.options.link_local;
  port->prefix = link_local ? 16 : 30;
  const uint8_t ipv4[4] = {static_cast<uint8_t>(link_local ? 169 : 10), static_cast<uint8_t>(link_local ? 254 : 77),
                           static_cast<uint8_t>(port->cable), static_cast<uint8_t>(1 + port->cable_end)};
  port->gids = gid_table(fabric.options, serial, port->active ? ipv4 : nullptr);
  return port.get();
}

bool has_gid(const Port& port, const ibv_gid& gid) {
  for (const ibv_gid& own : port.gids) {
    if (std::memcmp(own.raw, gid.raw, sizeof(gid.raw)) == 0) return true;
  }
  return false;
}

bool reaches(const Fabric& fabric, const Port& from, const Port& to) {
  if (!fabric.cabled()) return true;
  return from.cable >= 0 && from.cable == to.cable && from.cable_end != to.cable_end;
}

bool is_ipv4_mapped(const ibv_gid& gid) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.raw, prefix, sizeof(prefix)) == 0;
}

Context* owner_of_gid(Fabric& fabric, const ibv_gid& gid) {
  if (is_zero(gid)) return nullptr;
  for (auto& [key, context] : fabric.contexts) {
    if (has_gid(*context->port, gid)) return context.get();
  }
  return nullptr;
}

int post_error(const Fabric& fabric, int code) {
  if (!fabric.strict()) return code;
  errno = 0;
  return -code;
}

// Every SGE inside an MR of the PD with that lkey (and with LOCAL_WRITE when the HCA writes into it).
bool keys_ok(Fabric& fabric, Pd* pd, const ibv_sge* sges, int count, bool written) {
  for (int i = 0; i < count; ++i) {
    auto it = fabric.mr_by_key.find(sges[i].lkey);
    if (it == fabric.mr_by_key.end()) return false;
    const Mr& mr = *it->second;
    if (mr.pd != pd || (written && !(mr.access & IBV_ACCESS_LOCAL_WRITE))) return false;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(mr.verbs.addr);
    if (sges[i].addr < begin || sges[i].addr + sges[i].length > begin + mr.verbs.length) return false;
  }
  return true;
}

void push(Cq* cq, const ibv_wc& wc, uint64_t send_seq) {
  if (cq->context->vanished) return;
  if (cq->entries.size() >= static_cast<size_t>(cq->verbs.cqe)) {
    cq->overrun = true;
    return;
  }
  cq->entries.push_back(CqEntry{wc, send_seq});
}

ibv_wc completion(Qp* qp, uint64_t wr_id, ibv_wc_status status, ibv_wc_opcode opcode, uint32_t byte_len) {
  ibv_wc wc{};
  wc.wr_id = wr_id;
  wc.status = status;
  wc.opcode = opcode;
  wc.byte_len = byte_len;
  wc.qp_num = qp->verbs.qp_num;
  return wc;
}

// ERR: posted receives are flushed, waiting RC messages are lost.
void enter_error(Qp* qp) {
  qp->verbs.state = IBV_QPS_ERR;
  for (const RecvWr& recv : qp->recvs)
    push(qp->recv_cq, completion(qp, recv.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0));
  qp->recvs.clear();
  qp->recv_frames = 0;
  qp->queued.clear();
  qp->send_queue.clear();  // flushed
  qp->send_places = 0;
}

void error_completion(Qp* qp, uint64_t wr_id, ibv_wc_status status, ibv_wc_opcode opcode, uint64_t send_seq) {
  push(qp->send_cq, completion(qp, wr_id, status, opcode, 0), send_seq);
  enter_error(qp);
}

// Puts a message into the oldest posted receive of dest; returns the status the receive completed with.
static ibv_wc_status receive(Fabric& fabric, Qp* dest, const std::vector<uint8_t>& data, uint32_t source_qpn,
                             const uint32_t* imm) {
  RecvWr recv = std::move(dest->recvs.front());
  dest->recvs.pop_front();
  dest->recv_frames -= frames(recv.length);
  ibv_wc_status status = IBV_WC_SUCCESS;
  if (!recv.keys_ok) {
    status = IBV_WC_LOC_PROT_ERR;
  } else if (fabric.strict() ? frames(data.size()) != frames(recv.length) : data.size() > recv.length) {
    status = IBV_WC_LOC_LEN_ERR;
    ++fabric.counters.length_errors;
  }
  if (status != IBV_WC_SUCCESS) {
    push(dest->recv_cq, completion(dest, recv.wr_id, status, IBV_WC_RECV, 0));
    enter_error(dest);
    return status;
  }
  size_t offset = 0;
  for (const ibv_sge& sge : recv.sges) {
    const size_t n = std::min<size_t>(sge.length, data.size() - offset);
    if (n > 0) std::memcpy(reinterpret_cast<void*>(sge.addr), data.data() + offset, n);
    offset += n;
  }
  // Options::round_byte_len: whole frames, as Apple's provider might count them, never beyond the receive.
  uint64_t byte_len = data.size();
  if (fabric.strict() && fabric.options.round_byte_len) {
    byte_len = std::min(frames(byte_len) * kFrameBytes, recv.length);
  }
  ibv_wc wc = completion(dest, recv.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, static_cast<uint32_t>(byte_len));
  wc.src_qp = source_qpn;
  if (imm) {
    wc.wc_flags |= IBV_WC_WITH_IMM;
    wc.imm_data = *imm;
  }
  push(dest->recv_cq, wc);
  ++fabric.counters.delivered;
  const int cable = dest->context->port->cable;
  if (fabric.cabled() && cable >= 0) ++fabric.counters.per_cable[static_cast<size_t>(cable)];
  return status;
}

// RC: queued messages meet newly posted receives; the senders' completions come with the delivery.
void drain_queue(Fabric& fabric, Qp* dest) {
  while (!dest->queued.empty() && !dest->recvs.empty() && dest->verbs.state != IBV_QPS_ERR) {
    Queued message = std::move(dest->queued.front());
    dest->queued.pop_front();
    --fabric.counters.queued_rc;
    const ibv_wc_status status =
        receive(fabric, dest, message.data, message.source_qpn, message.has_imm ? &message.imm_data : nullptr);
    auto sender = fabric.qp_by_number.find(message.source_qpn);
    if (sender == fabric.qp_by_number.end()) continue;
    if (status != IBV_WC_SUCCESS) {
      error_completion(sender->second, message.wr_id, IBV_WC_REM_INV_REQ_ERR, IBV_WC_SEND, message.send_seq);
    } else if (message.signaled) {
      push(sender->second->send_cq,
           completion(sender->second, message.wr_id, IBV_WC_SUCCESS, IBV_WC_SEND, message.data.size()),
           message.send_seq);
    }
  }
  if (dest->verbs.state == IBV_QPS_ERR) {
    fabric.counters.queued_rc -= dest->queued.size();
    dest->queued.clear();
  }
}

namespace {

// What one send WR is: its QP, the WR, its completion's opcode and whether it is signaled.
struct Sending {
  Fabric& fabric;
  Qp* qp;
  const ibv_send_wr* wr;
  uint64_t length;
  bool signaled;
  bool rc;
  ibv_wc_opcode opcode;

  void succeeded() const {
    if (signaled) push(qp->send_cq, completion(qp, wr->wr_id, IBV_WC_SUCCESS, opcode, length), qp->sending_seq);
  }
  void failed(ibv_wc_status status) const { error_completion(qp, wr->wr_id, status, opcode, qp->sending_seq); }
  // UC loses what RC reports (with this status).
  void lost(ibv_wc_status rc_status) const {
    if (rc) {
      failed(rc_status);
    } else {
      ++fabric.counters.dropped_no_receive;
      succeeded();
    }
  }
};

// Injected faults hit the sends of one device only when Options::faulty_device says so (one flaky cable).
bool faults_here(const Fabric& fabric, const Qp* qp) {
  const int faulty = fabric.options.faulty_device;
  return faulty < 0 || (static_cast<size_t>(faulty) < fabric.devices.size() &&
                        qp->context->verbs.device == fabric.devices[static_cast<size_t>(faulty)].get());
}

// The QP a send of qp reaches, or null: dest_qp_num on a port with the GID qp addresses, of the same type, ready
// to receive, and reached from qp's port.
Qp* destination(Fabric& fabric, const Qp* qp) {
  auto it = fabric.qp_by_number.find(qp->dest_qpn);
  if (it == fabric.qp_by_number.end()) return nullptr;
  Qp* dest = it->second;
  const bool ready = dest->verbs.state == IBV_QPS_RTR || dest->verbs.state == IBV_QPS_RTS;
  if (!has_gid(*dest->context->port, qp->dgid) || dest->verbs.qp_type != qp->verbs.qp_type || !ready ||
      !reaches(fabric, *qp->context->port, *dest->context->port)) {
    return nullptr;
  }
  return dest;
}

// A permissive RDMA WRITE (with or without immediate) into dest's registered memory.
void write_remote(const Sending& send, Qp* dest, const std::vector<uint8_t>& data) {
  Fabric& fabric = send.fabric;
  const ibv_send_wr* wr = send.wr;
  auto it = fabric.mr_by_key.find(wr->wr.rdma.rkey);
  const Mr* mr = it == fabric.mr_by_key.end() ? nullptr : it->second;
  const uintptr_t begin = mr ? reinterpret_cast<uintptr_t>(mr->verbs.addr) : 0;
  const bool writable = mr && mr->pd->context == dest->context && (mr->access & IBV_ACCESS_REMOTE_WRITE) &&
                        wr->wr.rdma.remote_addr >= begin &&
                        wr->wr.rdma.remote_addr + send.length <= begin + mr->verbs.length;
  const bool needs_receive = wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  if (!writable || (needs_receive && dest->recvs.empty())) {
    send.lost(writable ? IBV_WC_RNR_RETRY_EXC_ERR : IBV_WC_REM_ACCESS_ERR);
    return;
  }
  if (send.length > 0) std::memcpy(reinterpret_cast<void*>(wr->wr.rdma.remote_addr), data.data(), send.length);
  if (needs_receive) {
    RecvWr recv = std::move(dest->recvs.front());
    dest->recvs.pop_front();
    dest->recv_frames -= frames(recv.length);
    ibv_wc wc = completion(dest, recv.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, send.length);
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.imm_data = wr->imm_data;
    wc.src_qp = send.qp->verbs.qp_num;
    push(dest->recv_cq, wc);
  }
  ++fabric.counters.delivered;
  send.succeeded();
}

// A SEND into dest's oldest posted receive (RC: queued until there is one; UC: lost without one).
void deliver(const Sending& send, Qp* dest, std::vector<uint8_t> data) {
  const ibv_send_wr* wr = send.wr;
  if (dest->recvs.empty()) {
    if (send.rc) {
      dest->queued.push_back(Queued{send.qp->verbs.qp_num, wr->wr_id, send.qp->sending_seq, send.signaled,
                                    std::move(data), wr->opcode == IBV_WR_SEND_WITH_IMM, wr->imm_data});
      ++send.fabric.counters.queued_rc;
    } else {
      send.lost(IBV_WC_SUCCESS);
    }
    return;
  }
  const uint32_t* imm = wr->opcode == IBV_WR_SEND_WITH_IMM ? &wr->imm_data : nullptr;
  const ibv_wc_status status = receive(send.fabric, dest, data, send.qp->verbs.qp_num, imm);
  if (send.rc && status != IBV_WC_SUCCESS) {
    send.failed(IBV_WC_REM_INV_REQ_ERR);
  } else {
    send.succeeded();
  }
}

}  // namespace

// One validated send WR, from gathering the payload to the completions.
void transmit(Fabric& fabric, Qp* qp, const ibv_send_wr* wr, uint64_t length) {
  const ibv_wc_opcode opcode =
      (wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) ? IBV_WC_RDMA_WRITE : IBV_WC_SEND;
  const Sending send{fabric, qp, wr, length, qp->sig_all || (wr->send_flags & IBV_SEND_SIGNALED) != 0,
                     qp->verbs.qp_type == IBV_QPT_RC, opcode};
  if (!(wr->send_flags & IBV_SEND_INLINE) && !keys_ok(fabric, qp->pd, wr->sg_list, wr->num_sge, false)) {
    send.failed(IBV_WC_LOC_PROT_ERR);
    return;
  }
  const bool faulty = faults_here(fabric, qp);
  if (fabric.fail_send && faulty) {
    fabric.fail_send = false;
    send.failed(fabric.fail_send_status);
    return;
  }
  std::vector<uint8_t> data(length);
  size_t offset = 0;
  for (int i = 0; i < wr->num_sge; ++i) {
    const uintptr_t begin = std::max<uintptr_t>(wr->sg_list[i].addr, fabric.watch_begin);
    const uintptr_t end = std::min<uintptr_t>(wr->sg_list[i].addr + wr->sg_list[i].length, fabric.watch_end);
    if (end > begin) fabric.counters.watched_bytes_sent += end - begin;
    if (wr->sg_list[i].length > 0) {
      std::memcpy(data.data() + offset, reinterpret_cast<const void*>(wr->sg_list[i].addr), wr->sg_list[i].length);
    }
    offset += wr->sg_list[i].length;
  }
  if (fabric.drop_sends > 0 && faulty) {
    --fabric.drop_sends;
    ++fabric.counters.dropped_injected;
    send.succeeded();
    return;
  }
  if (fabric.corrupt_sends > 0 && length > 0 && faulty) {
    --fabric.corrupt_sends;
    ++fabric.counters.corrupted;
    data[length / 2] ^= 0xff;
  }
  Qp* dest = destination(fabric, qp);
  if (dest == nullptr) {
    send.lost(IBV_WC_RETRY_EXC_ERR);
    return;
  }
  if (link_cut(fabric, qp->context, dest->context)) {
    lose_on_cut_link(fabric, qp, dest, wr, std::move(data), send.signaled, opcode);
    return;
  }
  if (dest->context->vanished) {
    ++fabric.counters.dropped_injected;
    if (!send.rc) send.succeeded();  // RC: the sender waits forever, as for a peer that stopped acknowledging
    return;
  }
  if (opcode == IBV_WC_RDMA_WRITE) {
    write_remote(send, dest, data);
  } else if (fabric.options.overtake_slots && !send.rc && length > kFrameBytes) {
    fabric.overtaken.push_back(Fabric::Overtaken{&dest->verbs, std::move(data), qp->verbs.qp_num});
    send.succeeded();
    return;
  } else {
    deliver(send, dest, std::move(data));
  }
  while (!fabric.overtaken.empty()) {  // the slots this send overtook arrive now
    Fabric::Overtaken late = std::move(fabric.overtaken.front());
    fabric.overtaken.pop_front();
    Qp* to = Fabric::find(fabric.qps, late.dest);
    if (to == nullptr || to->recvs.empty()) {
      ++fabric.counters.dropped_no_receive;
      continue;
    }
    receive(fabric, to, late.data, late.source_qpn, nullptr);
  }
}

}  // namespace tbcoll::ibverbs::fake::detail
