// Helpers for tests that drive the fake verbs provider directly: a rank's resources (Port), two connected QPs
// (Pair), and the QP transitions with the attributes and masks real rxe accepts (to_init, rtr_attr, rts_attr...).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "fake_verbs/fake_verbs.h"
#include "transports/ibverbs/memory.h"

namespace tbcoll::ibverbs::fake::test_support {

inline constexpr size_t kBufferBytes = 64 * 1024;

// One rank's resources: a context, a PD, one CQ per direction, a registered buffer.
struct Port {
  const VerbsApi* api = verbs();
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* send_cq = nullptr;
  ibv_cq* recv_cq = nullptr;
  RegisteredMemory buffer{kBufferBytes};  // on a 16 KiB boundary, as strict registrations must be
  ibv_mr* mr = nullptr;

  explicit Port(int device = 0, int cq_entries = 256) {
    int count = 0;
    ibv_device** list = api->get_device_list(&count);
    EXPECT_GT(count, device);
    context = api->open_device(list[device]);
    api->free_device_list(list);
    pd = api->alloc_pd(context);
    send_cq = api->create_cq(context, cq_entries, nullptr, nullptr, 0);
    recv_cq = api->create_cq(context, cq_entries, nullptr, nullptr, 0);
    mr = api->reg_mr(pd, buffer.data(), buffer.size(), kAccessFlags);
    EXPECT_TRUE(context && pd && send_cq && recv_cq && mr);
  }
  ibv_gid gid(int index = 1) const {
    ibv_gid gid{};
    EXPECT_EQ(api->query_gid(context, 1, index, &gid), 0);
    return gid;
  }
  ibv_qp* qp(ibv_qp_type type = IBV_QPT_UC, uint32_t max_wr = 64, int sig_all = 0) {
    ibv_qp_init_attr attr{};
    attr.send_cq = send_cq;
    attr.recv_cq = recv_cq;
    attr.qp_type = type;
    attr.sq_sig_all = sig_all;
    attr.cap.max_send_wr = max_wr;
    attr.cap.max_recv_wr = max_wr;
    attr.cap.max_send_sge = 1;
    attr.cap.max_recv_sge = 1;
    return api->create_qp(pd, &attr);
  }
  uint8_t* at(size_t offset) const { return buffer.data() + offset; }
  ibv_sge sge(size_t offset, uint32_t length) const {
    return ibv_sge{reinterpret_cast<uintptr_t>(buffer.data() + offset), length, mr->lkey};
  }
  int post_recv(ibv_qp* qp, size_t offset, uint32_t length, uint64_t wr_id = 0) {
    ibv_sge list = sge(offset, length);
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &list;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return api->post_recv(qp, &wr, &bad);
  }
  int post_send(ibv_qp* qp, size_t offset, uint32_t length, uint64_t wr_id = 0, ibv_wr_opcode opcode = IBV_WR_SEND,
                int flags = IBV_SEND_SIGNALED) {
    ibv_sge list = sge(offset, length);
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &list;
    wr.num_sge = 1;
    wr.opcode = opcode;
    wr.send_flags = flags;
    ibv_send_wr* bad = nullptr;
    return api->post_send(qp, &wr, &bad);
  }
  std::vector<ibv_wc> poll(ibv_cq* cq, int max = 64) {
    std::vector<ibv_wc> wc(max);
    const int n = api->poll_cq(cq, max, wc.data());
    EXPECT_GE(n, 0);
    wc.resize(std::max(n, 0));
    return wc;
  }
};

// The attributes rxe needs, with the masks of ib_modify_qp_is_ok().
inline int to_init(const VerbsApi* api, ibv_qp* qp) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = 1;
  attr.qp_access_flags = kAccessFlags;
  return api->modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}
inline ibv_qp_attr rtr_attr(const ibv_gid& dgid, uint32_t dest_qpn, int sgid_index = 1) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  attr.dest_qp_num = dest_qpn;
  attr.rq_psn = 0;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  attr.ah_attr.is_global = 1;
  attr.ah_attr.port_num = 1;
  attr.ah_attr.grh.dgid = dgid;
  attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(sgid_index);
  attr.ah_attr.grh.hop_limit = 1;
  return attr;
}
inline int rtr_mask(ibv_qp* qp) {
  int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  if (qp->qp_type == IBV_QPT_RC) mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  return mask;
}
inline int rts_mask(ibv_qp* qp) {
  int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (qp->qp_type == IBV_QPT_RC) mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  return mask;
}
inline ibv_qp_attr rts_attr() {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = 0;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.max_rd_atomic = 1;
  return attr;
}
inline void connect(const VerbsApi* api, ibv_qp* qp, const ibv_gid& dgid, uint32_t dest_qpn) {
  ASSERT_EQ(to_init(api, qp), 0);
  ibv_qp_attr rtr = rtr_attr(dgid, dest_qpn);
  ASSERT_EQ(api->modify_qp(qp, &rtr, rtr_mask(qp)), 0);
  ibv_qp_attr rts = rts_attr();
  ASSERT_EQ(api->modify_qp(qp, &rts, rts_mask(qp)), 0);
}

// Two ports with one connected QP each.
struct Pair {
  Port a, b;
  ibv_qp* qa = nullptr;
  ibv_qp* qb = nullptr;
  explicit Pair(ibv_qp_type type = IBV_QPT_UC, uint32_t max_wr = 64, int sig_all = 0) {
    qa = a.qp(type, max_wr, sig_all);
    qb = b.qp(type, max_wr, sig_all);
    EXPECT_TRUE(qa && qb);
    connect(a.api, qa, b.gid(), qb->qp_num);
    connect(b.api, qb, a.gid(), qa->qp_num);
  }
};

inline Options permissive() {
  Options options;
  options.apple_strict = false;
  return options;
}

class FakeVerbs : public ::testing::Test {
 protected:
  void SetUp() override { reset(Options{}); }
};

}  // namespace tbcoll::ibverbs::fake::test_support
