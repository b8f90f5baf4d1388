// The thread-level faults of faults.h: pauses (fake_verbs.cc's calls wait on them), cut links (fabric.cc's
// transmit() asks link_cut()) and RC retries that run out.
#include "fake_verbs/faults.h"

#include <thread>
#include <utility>

#include "fake_verbs/fabric.h"

namespace tbcoll::ibverbs::fake {
namespace detail {

bool link_cut(const Fabric& fabric, Context* a, Context* b) {
  if (a->isolated || b->isolated) return true;
  return fabric.cut_links.count({a, b}) != 0;
}

void lose_on_cut_link(Fabric& fabric, Qp* qp, Qp* dest, const ibv_send_wr* wr, std::vector<uint8_t> data, bool signaled,
                      ibv_wc_opcode opcode) {
  if (qp->verbs.qp_type != IBV_QPT_RC) {
    ++fabric.counters.dropped_injected;
    if (signaled) push(qp->send_cq, completion(qp, wr->wr_id, IBV_WC_SUCCESS, opcode, data.size()), qp->sending_seq);
    return;
  }
  // The HCA resends after each local ACK timeout (4.096 us x 2^timeout), retry_cnt times, then gives up.
  const double timeout_s = 4.096e-6 * static_cast<double>(uint64_t{1} << std::min<uint8_t>(qp->timeout, 31));
  const auto retries = std::chrono::duration<double>(timeout_s * (qp->retry_cnt + 1));
  Retrying retry;
  retry.qpn = qp->verbs.qp_num;
  retry.dest_qpn = dest->verbs.qp_num;
  retry.wr_id = wr->wr_id;
  retry.send_seq = qp->sending_seq;
  retry.opcode = opcode;
  retry.due =
      std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(retries);
  retry.message.source_qpn = qp->verbs.qp_num;
  retry.message.wr_id = wr->wr_id;
  retry.message.send_seq = qp->sending_seq;
  retry.message.signaled = signaled;
  retry.message.data = std::move(data);
  retry.message.has_imm = wr->opcode == IBV_WR_SEND_WITH_IMM;
  retry.message.imm_data = wr->imm_data;
  fabric.retrying.push_back(std::move(retry));
}

// A mended link: the sends still retrying on it reach their destination, in order, as RC's retransmission would
// (they wait there for receives like any RC message).
static void deliver_retried(Fabric& fabric) {
  std::set<Qp*> touched;
  for (auto it = fabric.retrying.begin(); it != fabric.retrying.end();) {
    auto sender = fabric.qp_by_number.find(it->qpn);
    auto dest = fabric.qp_by_number.find(it->dest_qpn);
    const bool both = sender != fabric.qp_by_number.end() && dest != fabric.qp_by_number.end();
    if (!both || it->opcode != IBV_WC_SEND || sender->second->verbs.state == IBV_QPS_ERR ||
        link_cut(fabric, sender->second->context, dest->second->context)) {
      ++it;
      continue;
    }
    dest->second->queued.push_back(std::move(it->message));
    ++fabric.counters.queued_rc;
    touched.insert(dest->second);
    it = fabric.retrying.erase(it);
  }
  for (Qp* dest : touched) drain_queue(fabric, dest);
}

void fire_due_retries(Fabric& fabric, Cq* cq) {
  const auto now = std::chrono::steady_clock::now();
  auto& retrying = fabric.retrying;
  for (;;) {
    Qp* qp = nullptr;
    auto due = retrying.begin();
    while (due != retrying.end()) {
      auto found = fabric.qp_by_number.find(due->qpn);
      if (found == fabric.qp_by_number.end()) {  // destroyed meanwhile
        due = retrying.erase(due);
        continue;
      }
      if (found->second->send_cq == cq && due->due <= now) {
        qp = found->second;
        break;
      }
      ++due;
    }
    if (qp == nullptr) return;
    // The oldest send of that queue pair gives up (entries are in posting order); the ones behind it are flushed.
    const ibv_wc_status status = qp->verbs.state == IBV_QPS_ERR ? IBV_WC_WR_FLUSH_ERR : IBV_WC_RETRY_EXC_ERR;
    error_completion(qp, due->wr_id, status, due->opcode, due->send_seq);
    const uint32_t qpn = due->qpn;
    retrying.erase(due);
    for (auto later = retrying.begin(); later != retrying.end();) {
      if (later->qpn != qpn) {
        ++later;
        continue;
      }
      push(qp->send_cq, completion(qp, later->wr_id, IBV_WC_WR_FLUSH_ERR, later->opcode, 0));
      later = retrying.erase(later);
    }
  }
}

}  // namespace detail

using namespace detail;  // NOLINT(google-build-using-namespace)

namespace {
Context* find_context(Fabric& fabric, ibv_context* verbs) {
  return verbs ? Fabric::find(fabric.contexts, verbs) : nullptr;
}
}  // namespace

ibv_context* context_of_this_thread() {
  ibv_context* found = nullptr;
  uint64_t newest = 0;
  with_fabric([&](Fabric& fabric) {
    for (auto& [verbs, context] : fabric.contexts) {
      if (context->opener == std::this_thread::get_id() && (found == nullptr || context->serial > newest)) {
        found = verbs;
        newest = context->serial;
      }
    }
  });
  return found;
}

void pause(ibv_context* verbs) {
  with_fabric([&](Fabric& fabric) {
    if (Context* context = find_context(fabric, verbs)) context->paused = true;
  });
}

void resume(ibv_context* verbs) {
  with_fabric([&](Fabric& fabric) {
    if (Context* context = find_context(fabric, verbs)) context->paused = false;
  });
}

namespace {

// cut (down) or mend: a's every link (b null) or the link between a and b, both ways. Mending delivers what RC
// has been resending meanwhile.
void set_links(ibv_context* a, ibv_context* b, bool down) {
  with_fabric([&](Fabric& fabric) {
    Context* first = find_context(fabric, a);
    Context* second = find_context(fabric, b);
    if (first == nullptr) return;
    if (b == nullptr) {
      first->isolated = down;
    } else if (second != nullptr) {
      for (auto link : {std::make_pair(first, second), std::make_pair(second, first)}) {
        if (down) {
          fabric.cut_links.insert(link);
        } else {
          fabric.cut_links.erase(link);
        }
      }
    }
    if (!down) deliver_retried(fabric);
  });
}

}  // namespace

void mend(ibv_context* a, ibv_context* b) { set_links(a, b, false); }

void cut(ibv_context* a, ibv_context* b) { set_links(a, b, true); }

int break_queue_pairs(ibv_context* a, ibv_context* b) {
  int moved = 0;
  with_fabric([&](Fabric& fabric) {
    Context* from = find_context(fabric, a);
    Context* to = find_context(fabric, b);
    if (from == nullptr || (b != nullptr && to == nullptr)) return;
    for (auto& [verbs, qp] : fabric.qps) {
      if (qp->context != from || qp->verbs.state == IBV_QPS_RESET || qp->verbs.state == IBV_QPS_ERR) continue;
      if (to != nullptr && !has_gid(*to->port, qp->dgid)) continue;
      enter_error(qp.get());
      ++moved;
    }
  });
  return moved;
}

}  // namespace tbcoll::ibverbs::fake
