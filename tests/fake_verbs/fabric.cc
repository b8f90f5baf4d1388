// The wire of the fake fabric: where a send goes, what it finds there, and which completions it leaves.
#include "fake_verbs/fabric.h"

#include <cstdio>
#include <cstring>

namespace tbcoll::ibverbs::fake::detail {

std::unique_ptr<Fabric> make_fabric(const Options& options) {
  auto fabric = std::make_unique<Fabric>();
  fabric->options = options;
  for (int i = 0; i < options.devices; ++i) {
    auto device = std::make_unique<ibv_device>();
    device->node_type = IBV_NODE_CA;
    device->transport_type = IBV_TRANSPORT_IB;
    std::snprintf(device->name, sizeof(device->name), "rdma_en%d", i);
    std::snprintf(device->dev_name, sizeof(device->dev_name), "uverbs%d", i);
    fabric->devices.push_back(std::move(device));
  }
  return fabric;
}

bool is_zero(const ibv_gid& gid) {
  static const ibv_gid zero{};
  return std::memcmp(gid.raw, zero.raw, sizeof(gid.raw)) == 0;
}

std::vector<ibv_gid> gid_table(const Options& options, int port) {
  std::vector<ibv_gid> gids(std::max(2, options.ipv4_gid_index + 1));
  for (size_t i = 0; i < gids.size(); ++i) {
    uint8_t* raw = gids[i].raw;
    if (static_cast<int>(i) == options.ipv4_gid_index) {
      raw[10] = 0xff, raw[11] = 0xff, raw[12] = 10, raw[13] = 9;
      raw[14] = static_cast<uint8_t>(port >> 8), raw[15] = static_cast<uint8_t>(port);
    } else {
      raw[0] = i == 0 ? 0xfe : 0xfd, raw[1] = i == 0 ? 0x80 : 0x00;
      raw[8] = 0x02, raw[13] = static_cast<uint8_t>(i);
      raw[14] = static_cast<uint8_t>(port >> 8), raw[15] = static_cast<uint8_t>(port);
    }
  }
  return gids;
}

bool is_ipv4_mapped(const ibv_gid& gid) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.raw, prefix, sizeof(prefix)) == 0;
}

Context* owner_of_gid(Fabric& fabric, const ibv_gid& gid) {
  if (is_zero(gid)) return nullptr;
  for (auto& [key, context] : fabric.contexts) {
    for (const ibv_gid& own : context->gids) {
      if (std::memcmp(own.raw, gid.raw, sizeof(gid.raw)) == 0) return context.get();
    }
  }
  return nullptr;
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
  ibv_wc wc = completion(dest, recv.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, static_cast<uint32_t>(data.size()));
  wc.src_qp = source_qpn;
  if (imm) {
    wc.wc_flags |= IBV_WC_WITH_IMM;
    wc.imm_data = *imm;
  }
  push(dest->recv_cq, wc);
  ++fabric.counters.delivered;
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

// One validated send WR, from gathering the payload to the completions.
void transmit(Fabric& fabric, Qp* qp, const ibv_send_wr* wr, uint64_t length) {
  const bool signaled = qp->sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
  const bool rc = qp->verbs.qp_type == IBV_QPT_RC;
  const ibv_wc_opcode opcode =
      (wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) ? IBV_WC_RDMA_WRITE : IBV_WC_SEND;
  auto succeeded = [&] {
    if (signaled) push(qp->send_cq, completion(qp, wr->wr_id, IBV_WC_SUCCESS, opcode, length), qp->sending_seq);
  };
  if (!(wr->send_flags & IBV_SEND_INLINE) && !keys_ok(fabric, qp->pd, wr->sg_list, wr->num_sge, false)) {
    error_completion(qp, wr->wr_id, IBV_WC_LOC_PROT_ERR, opcode, qp->sending_seq);
    return;
  }
  // Injected faults hit the sends of one device only when Options::faulty_device says so (one flaky cable).
  const int faulty = fabric.options.faulty_device;
  const bool faults_here = faulty < 0 || (static_cast<size_t>(faulty) < fabric.devices.size() &&
                                          qp->context->verbs.device == fabric.devices[static_cast<size_t>(faulty)].get());
  if (fabric.fail_send && faults_here) {
    fabric.fail_send = false;
    error_completion(qp, wr->wr_id, fabric.fail_send_status, opcode, qp->sending_seq);
    return;
  }
  std::vector<uint8_t> data(length);
  size_t offset = 0;
  for (int i = 0; i < wr->num_sge; ++i) {
    if (wr->sg_list[i].length > 0) {
      std::memcpy(data.data() + offset, reinterpret_cast<const void*>(wr->sg_list[i].addr), wr->sg_list[i].length);
    }
    offset += wr->sg_list[i].length;
  }
  if (fabric.drop_sends > 0 && faults_here) {
    --fabric.drop_sends;
    ++fabric.counters.dropped_injected;
    succeeded();
    return;
  }
  if (fabric.corrupt_sends > 0 && length > 0 && faults_here) {
    --fabric.corrupt_sends;
    ++fabric.counters.corrupted;
    data[length / 2] ^= 0xff;
  }
  Qp* dest = nullptr;
  if (auto it = fabric.qp_by_number.find(qp->dest_qpn); it != fabric.qp_by_number.end()) dest = it->second;
  if (dest != nullptr && (owner_of_gid(fabric, qp->dgid) != dest->context || dest->verbs.qp_type != qp->verbs.qp_type ||
                          (dest->verbs.state != IBV_QPS_RTR && dest->verbs.state != IBV_QPS_RTS))) {
    dest = nullptr;
  }
  if (dest == nullptr) {
    if (rc) {
      error_completion(qp, wr->wr_id, IBV_WC_RETRY_EXC_ERR, opcode, qp->sending_seq);
    } else {
      ++fabric.counters.dropped_no_receive;
      succeeded();
    }
    return;
  }
  if (link_cut(fabric, qp->context, dest->context)) {
    lose_on_cut_link(fabric, qp, dest, wr, std::move(data), signaled, opcode);
    return;
  }
  if (dest->context->vanished) {
    ++fabric.counters.dropped_injected;
    if (!rc) succeeded();  // RC: the sender waits forever, as for a peer that stopped acknowledging
    return;
  }
  if (wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    auto it = fabric.mr_by_key.find(wr->wr.rdma.rkey);
    const Mr* mr = it == fabric.mr_by_key.end() ? nullptr : it->second;
    const uintptr_t begin = mr ? reinterpret_cast<uintptr_t>(mr->verbs.addr) : 0;
    const bool writable = mr && mr->pd->context == dest->context && (mr->access & IBV_ACCESS_REMOTE_WRITE) &&
                          wr->wr.rdma.remote_addr >= begin &&
                          wr->wr.rdma.remote_addr + length <= begin + mr->verbs.length;
    const bool needs_receive = wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    if (!writable || (needs_receive && dest->recvs.empty())) {
      if (rc) {
        error_completion(qp, wr->wr_id, writable ? IBV_WC_RNR_RETRY_EXC_ERR : IBV_WC_REM_ACCESS_ERR, opcode,
                         qp->sending_seq);
      } else {
        ++fabric.counters.dropped_no_receive;
        succeeded();
      }
      return;
    }
    if (length > 0) std::memcpy(reinterpret_cast<void*>(wr->wr.rdma.remote_addr), data.data(), length);
    if (needs_receive) {
      RecvWr recv = std::move(dest->recvs.front());
      dest->recvs.pop_front();
      dest->recv_frames -= frames(recv.length);
      ibv_wc wc = completion(dest, recv.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, length);
      wc.wc_flags = IBV_WC_WITH_IMM;
      wc.imm_data = wr->imm_data;
      wc.src_qp = qp->verbs.qp_num;
      push(dest->recv_cq, wc);
    }
    ++fabric.counters.delivered;
    succeeded();
    return;
  }
  if (dest->recvs.empty()) {
    if (rc) {
      dest->queued.push_back(Queued{qp->verbs.qp_num, wr->wr_id, qp->sending_seq, signaled, std::move(data),
                                    wr->opcode == IBV_WR_SEND_WITH_IMM, wr->imm_data});
      ++fabric.counters.queued_rc;
    } else {
      ++fabric.counters.dropped_no_receive;
      succeeded();
    }
    return;
  }
  const uint32_t* imm = wr->opcode == IBV_WR_SEND_WITH_IMM ? &wr->imm_data : nullptr;
  const ibv_wc_status status = receive(fabric, dest, data, qp->verbs.qp_num, imm);
  if (rc && status != IBV_WC_SUCCESS) {
    error_completion(qp, wr->wr_id, IBV_WC_REM_INV_REQ_ERR, opcode, qp->sending_seq);
  } else {
    succeeded();
  }
}

}  // namespace tbcoll::ibverbs::fake::detail
