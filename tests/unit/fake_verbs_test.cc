// The fake verbs provider (tests/fake_verbs): every rule it enforces, each fault it injects, a UC ping-pong through
// the function table and a two-thread exchange. Each test fails if its rule were not enforced.
#include "fake_verbs/fake_verbs.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

namespace tbcoll::ibverbs::fake {
namespace {

constexpr size_t kBufferBytes = 64 * 1024;

// One rank's resources: a context, a PD, one CQ per direction, a registered buffer.
struct Port {
  const VerbsApi* api = verbs();
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* send_cq = nullptr;
  ibv_cq* recv_cq = nullptr;
  std::vector<uint8_t> buffer = std::vector<uint8_t>(kBufferBytes);
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
    mr = api->reg_mr(pd, buffer.data(), buffer.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
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
  uint8_t* at(size_t offset) { return buffer.data() + offset; }
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
int to_init(const VerbsApi* api, ibv_qp* qp) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = 1;
  attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  return api->modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}
ibv_qp_attr rtr_attr(const ibv_gid& dgid, uint32_t dest_qpn, int sgid_index = 1) {
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
int rtr_mask(ibv_qp* qp) {
  int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  if (qp->qp_type == IBV_QPT_RC) mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  return mask;
}
int rts_mask(ibv_qp* qp) {
  int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (qp->qp_type == IBV_QPT_RC) mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  return mask;
}
ibv_qp_attr rts_attr() {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = 0;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.max_rd_atomic = 1;
  return attr;
}
void connect(const VerbsApi* api, ibv_qp* qp, const ibv_gid& dgid, uint32_t dest_qpn) {
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

Options permissive() {
  Options options;
  options.apple_strict = false;
  return options;
}

class FakeVerbs : public ::testing::Test {
 protected:
  void SetUp() override { reset(Options{}); }
};

TEST_F(FakeVerbs, ListsTheDevicesAndFailsLikeAKernelWithoutRdma) {
  Options options;
  options.devices = 3;
  reset(options);
  const VerbsApi* api = verbs();
  EXPECT_EQ(api->provider, "fake");
  int count = -1;
  ibv_device** list = api->get_device_list(&count);
  ASSERT_EQ(count, 3);
  EXPECT_STREQ(api->get_device_name(list[0]), "rdma_en0");
  EXPECT_STREQ(api->get_device_name(list[2]), "rdma_en2");
  EXPECT_EQ(list[3], nullptr);
  api->free_device_list(list);

  options.no_kernel_support = true;
  reset(options);
  errno = 0;
  EXPECT_EQ(api->get_device_list(&count), nullptr);
  EXPECT_EQ(errno, ENOSYS);
  EXPECT_EQ(count, 0);
}

TEST_F(FakeVerbs, PortIsActiveEthernetWithMtu1024AndOnlyPortOne) {
  Port port;
  ibv_port_attr attr{};
  ASSERT_EQ(port.api->query_port(port.context, 1, &attr), 0);
  EXPECT_EQ(attr.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(attr.active_mtu, IBV_MTU_1024);
  EXPECT_EQ(attr.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(attr.max_msg_sz, 16773120u);
  EXPECT_EQ(attr.gid_tbl_len, 2);
  EXPECT_EQ(port.api->query_port(port.context, 2, &attr), EINVAL);
}

TEST_F(FakeVerbs, APortThatIsDownOpensButHasNoProtectionDomain) {
  Options options;
  options.ports_active = false;
  reset(options);
  const VerbsApi* api = verbs();
  ibv_device** list = api->get_device_list(nullptr);
  ibv_context* context = api->open_device(list[0]);
  api->free_device_list(list);
  ASSERT_NE(context, nullptr);
  ibv_port_attr attr{};
  ASSERT_EQ(api->query_port(context, 1, &attr), 0);
  EXPECT_EQ(attr.state, IBV_PORT_DOWN);
  EXPECT_EQ(api->alloc_pd(context), nullptr);
  EXPECT_EQ(api->close_device(context), 0);
}

TEST_F(FakeVerbs, EveryContextIsAPortWithItsOwnIpv4MappedGid) {
  Port first, second;
  const ibv_gid link_local = first.gid(0);
  EXPECT_EQ(link_local.raw[0], 0xfe);
  EXPECT_EQ(link_local.raw[1], 0x80);
  const uint8_t mapped_1[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 9, 0, 1};
  const uint8_t mapped_2[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 9, 0, 2};
  EXPECT_EQ(std::memcmp(first.gid(1).raw, mapped_1, 16), 0);
  EXPECT_EQ(std::memcmp(second.gid(1).raw, mapped_2, 16), 0);
  ibv_gid gid{};
  EXPECT_EQ(first.api->query_gid(first.context, 1, 2, &gid), EINVAL) << "beyond the table";
}

TEST_F(FakeVerbs, Ipv4GidCanSitAtIndexTwoAndIndexOneIsThenNotIpv4) {
  Options options;
  options.ipv4_gid_index = 2;
  reset(options);
  Port a, b;
  EXPECT_NE(a.gid(1).raw[10], 0xff) << "index 1 is an IPv6 GID: code must scan";
  EXPECT_EQ(a.gid(2).raw[10], 0xff);
  EXPECT_EQ(a.gid(2).raw[12], 10);
  ibv_qp* qa = a.qp();
  ibv_qp* qb = b.qp();
  ASSERT_EQ(to_init(a.api, qa), 0);
  ibv_qp_attr wrong = rtr_attr(b.gid(2), qb->qp_num, 1);
  EXPECT_EQ(a.api->modify_qp(qa, &wrong, rtr_mask(qa)), EINVAL) << "sgid_index 1 is not the IPv4 GID";
  ibv_qp_attr right = rtr_attr(b.gid(2), qb->qp_num, 2);
  EXPECT_EQ(a.api->modify_qp(qa, &right, rtr_mask(qa)), 0);
}

TEST_F(FakeVerbs, WithoutAnIpv4AddressRtrFailsWithEinval) {
  Options options;
  options.ipv4_gid_index = -1;
  reset(options);
  Port a, b;
  ibv_qp* qa = a.qp();
  ibv_qp* qb = b.qp();
  ASSERT_EQ(to_init(a.api, qa), 0);
  for (int sgid : {0, 1}) {
    ibv_qp_attr attr = rtr_attr(b.gid(sgid), qb->qp_num, sgid);
    EXPECT_EQ(a.api->modify_qp(qa, &attr, rtr_mask(qa)), EINVAL) << "sgid " << sgid;
  }
}

TEST_F(FakeVerbs, StrictRefusesRcWithEopnotsuppPermissiveAllowsIt) {
  Port port;
  errno = 0;
  EXPECT_EQ(port.qp(IBV_QPT_RC), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  errno = 0;
  EXPECT_EQ(port.qp(IBV_QPT_UD), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  reset(permissive());
  Port relaxed;
  EXPECT_NE(relaxed.qp(IBV_QPT_RC), nullptr);
}

TEST_F(FakeVerbs, QpCapsAreLimitedToOneSgeAnd4095WorkRequests) {
  Port port;
  ibv_qp_init_attr attr{};
  attr.send_cq = port.send_cq;
  attr.recv_cq = port.recv_cq;
  attr.qp_type = IBV_QPT_UC;
  attr.cap = {4095, 4095, 1, 1, 0};
  ibv_qp* qp = port.api->create_qp(port.pd, &attr);
  EXPECT_NE(qp, nullptr);
  for (ibv_qp_cap cap : {ibv_qp_cap{4096, 1, 1, 1, 0}, ibv_qp_cap{1, 4096, 1, 1, 0}, ibv_qp_cap{1, 1, 2, 1, 0},
                         ibv_qp_cap{1, 1, 1, 2, 0}, ibv_qp_cap{1, 1, 1, 1, 64}}) {
    attr.cap = cap;
    errno = 0;
    EXPECT_EQ(port.api->create_qp(port.pd, &attr), nullptr);
    EXPECT_EQ(errno, EINVAL);
  }
}

TEST_F(FakeVerbs, TheEleventhQpOfAContextFailsWithEbusyUntilOneIsDestroyed) {
  Port port, other;
  std::vector<ibv_qp*> qps;
  for (int i = 0; i < 10; ++i) {
    qps.push_back(port.qp());
    ASSERT_NE(qps.back(), nullptr) << i;
  }
  EXPECT_EQ(live_qps(port.context), 10);
  errno = 0;
  EXPECT_EQ(port.qp(), nullptr);
  EXPECT_EQ(errno, EBUSY);
  EXPECT_NE(other.qp(), nullptr) << "the budget is per context";
  ASSERT_EQ(port.api->destroy_qp(qps.back()), 0);
  EXPECT_EQ(live_qps(port.context), 9);
  EXPECT_NE(port.qp(), nullptr);
}

TEST_F(FakeVerbs, RegistrationsBeyondTheLimitFailWithEnomem) {
  Port port;  // holds one MR
  std::vector<uint8_t> memory(4096);
  std::vector<ibv_mr*> mrs;
  for (int i = 1; i < 100; ++i) {
    mrs.push_back(port.api->reg_mr(port.pd, memory.data(), memory.size(), IBV_ACCESS_LOCAL_WRITE));
    ASSERT_NE(mrs.back(), nullptr) << i;
  }
  EXPECT_EQ(live_mrs(port.context), 100);
  errno = 0;
  EXPECT_EQ(port.api->reg_mr(port.pd, memory.data(), memory.size(), IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  ASSERT_EQ(port.api->dereg_mr(mrs.back()), 0);
  EXPECT_EQ(live_mrs(port.context), 99);
  EXPECT_NE(port.api->reg_mr(port.pd, memory.data(), memory.size(), IBV_ACCESS_LOCAL_WRITE), nullptr);
  Options options;
  options.max_mrs = 1000;
  reset(options);
  Port roomy;
  errno = 0;
  EXPECT_EQ(roomy.api->reg_mr(roomy.pd, memory.data(), memory.size(), IBV_ACCESS_REMOTE_WRITE), nullptr)
      << "remote write without local write";
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(FakeVerbs, ModifyQpWantsTheMasksRxeWants) {
  Port a, b;
  ibv_qp* qa = a.qp();
  ibv_qp* qb = b.qp();
  const VerbsApi* api = a.api;
  ibv_qp_attr init{};
  init.qp_state = IBV_QPS_INIT;
  init.port_num = 1;
  EXPECT_EQ(api->modify_qp(qa, &init, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX), EINVAL) << "no access flags";
  init.port_num = 2;
  EXPECT_EQ(api->modify_qp(qa, &init, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS), EINVAL)
      << "port 2";
  ibv_qp_attr rtr = rtr_attr(b.gid(), qb->qp_num);
  EXPECT_EQ(api->modify_qp(qa, &rtr, rtr_mask(qa)), EINVAL) << "RESET to RTR skips INIT";
  ibv_qp_attr error_attr{};
  error_attr.qp_state = IBV_QPS_ERR;
  EXPECT_EQ(api->modify_qp(qa, &error_attr, IBV_QP_STATE), EINVAL) << "no RESET to ERR in the kernel's table";
  ASSERT_EQ(to_init(api, qa), 0);
  for (int missing : {IBV_QP_AV, IBV_QP_PATH_MTU, IBV_QP_DEST_QPN, IBV_QP_RQ_PSN}) {
    EXPECT_EQ(api->modify_qp(qa, &rtr, rtr_mask(qa) & ~missing), EINVAL) << "missing " << missing;
  }
  EXPECT_EQ(api->modify_qp(qa, &rtr, rtr_mask(qa) | IBV_QP_MAX_DEST_RD_ATOMIC), EINVAL) << "an RC attribute on UC";
  ibv_qp_attr bad = rtr;
  bad.ah_attr.is_global = 0;
  EXPECT_EQ(api->modify_qp(qa, &bad, rtr_mask(qa)), EINVAL) << "no GRH";
  bad = rtr;
  bad.ah_attr.grh.sgid_index = 0;
  EXPECT_EQ(api->modify_qp(qa, &bad, rtr_mask(qa)), EINVAL) << "link-local source GID";
  bad = rtr;
  bad.ah_attr.grh.dgid.raw[15] = 99;
  EXPECT_EQ(api->modify_qp(qa, &bad, rtr_mask(qa)), EINVAL) << "nobody owns the destination GID";
  bad = rtr;
  bad.ah_attr.grh.dgid = b.gid(0);
  EXPECT_EQ(api->modify_qp(qa, &bad, rtr_mask(qa)), EINVAL) << "the peer's link-local GID: Apple wants the IPv4 one";
  bad = rtr;
  bad.ah_attr.port_num = 0;
  EXPECT_EQ(api->modify_qp(qa, &bad, rtr_mask(qa)), EINVAL) << "port 0";
  bad = rtr;
  bad.path_mtu = static_cast<ibv_mtu>(0);
  EXPECT_EQ(api->modify_qp(qa, &bad, rtr_mask(qa)), EINVAL) << "no MTU";
  EXPECT_EQ(qa->state, IBV_QPS_INIT);
  ASSERT_EQ(api->modify_qp(qa, &rtr, rtr_mask(qa)), 0);
  EXPECT_EQ(qa->state, IBV_QPS_RTR);
  ibv_qp_attr rts = rts_attr();
  EXPECT_EQ(api->modify_qp(qa, &rts, IBV_QP_STATE), EINVAL) << "no sq_psn";
  EXPECT_EQ(api->modify_qp(qa, &rts, rts_mask(qa) | IBV_QP_TIMEOUT), EINVAL) << "rxe refuses TIMEOUT on UC";
  ASSERT_EQ(api->modify_qp(qa, &rts, rts_mask(qa)), 0);
  EXPECT_EQ(qa->state, IBV_QPS_RTS);
  ibv_qp_attr reset_attr{};
  reset_attr.qp_state = IBV_QPS_RESET;
  EXPECT_EQ(api->modify_qp(qa, &reset_attr, IBV_QP_STATE), 0);
  EXPECT_EQ(qa->state, IBV_QPS_RESET);
}

TEST_F(FakeVerbs, RcNeedsItsOwnAttributesInPermissiveMode) {
  reset(permissive());
  Port a, b;
  ibv_qp* qa = a.qp(IBV_QPT_RC);
  ibv_qp* qb = b.qp(IBV_QPT_RC);
  ASSERT_EQ(to_init(a.api, qa), 0);
  ibv_qp_attr rtr = rtr_attr(b.gid(), qb->qp_num);
  EXPECT_EQ(a.api->modify_qp(qa, &rtr, rtr_mask(qa) & ~IBV_QP_MIN_RNR_TIMER), EINVAL);
  ASSERT_EQ(a.api->modify_qp(qa, &rtr, rtr_mask(qa)), 0);
  ibv_qp_attr rts = rts_attr();
  EXPECT_EQ(a.api->modify_qp(qa, &rts, IBV_QP_STATE | IBV_QP_SQ_PSN), EINVAL);
  EXPECT_EQ(a.api->modify_qp(qa, &rts, rts_mask(qa)), 0);
}

TEST_F(FakeVerbs, StrictReceivesArePostedOnlyInRts) {
  Port a, b;
  ibv_qp* qa = a.qp();
  ibv_qp* qb = b.qp();
  EXPECT_EQ(a.post_recv(qa, 0, 4096), EINVAL) << "RESET";
  ASSERT_EQ(to_init(a.api, qa), 0);
  EXPECT_EQ(a.post_recv(qa, 0, 4096), EINVAL) << "INIT";
  ibv_qp_attr rtr = rtr_attr(b.gid(), qb->qp_num);
  ASSERT_EQ(a.api->modify_qp(qa, &rtr, rtr_mask(qa)), 0);
  EXPECT_EQ(a.post_recv(qa, 0, 4096), EINVAL) << "RTR";
  ibv_qp_attr rts = rts_attr();
  ASSERT_EQ(a.api->modify_qp(qa, &rts, rts_mask(qa)), 0);
  EXPECT_EQ(a.post_recv(qa, 0, 4096), 0);

  reset(permissive());
  Port c, d;
  ibv_qp* qc = c.qp();
  ibv_qp* qd = d.qp();
  ASSERT_EQ(to_init(c.api, qc), 0);
  rtr = rtr_attr(d.gid(), qd->qp_num);
  ASSERT_EQ(c.api->modify_qp(qc, &rtr, rtr_mask(qc)), 0);
  EXPECT_EQ(c.post_recv(qc, 0, 4096), 0) << "RTR is enough on RoCE";
}

TEST_F(FakeVerbs, StrictSendsAreSendOnlyInRtsWithOneSge) {
  Pair pair;
  Port& a = pair.a;
  EXPECT_EQ(a.post_send(pair.qa, 0, 64, 0, IBV_WR_RDMA_WRITE), EINVAL);
  EXPECT_EQ(a.post_send(pair.qa, 0, 64, 0, IBV_WR_SEND_WITH_IMM), EINVAL);
  EXPECT_EQ(a.post_send(pair.qa, 0, 64, 0, IBV_WR_RDMA_READ), EINVAL);
  EXPECT_EQ(a.post_send(pair.qa, 0, 64, 0, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_INLINE), EINVAL);
  ibv_sge two[2] = {a.sge(0, 8), a.sge(8, 8)};
  ibv_send_wr wr{};
  wr.sg_list = two;
  wr.num_sge = 2;
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(a.api->post_send(pair.qa, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  ibv_sge huge{reinterpret_cast<uintptr_t>(a.at(0)), 16773121, a.mr->lkey};
  wr.sg_list = &huge;
  wr.num_sge = 1;
  EXPECT_EQ(a.api->post_send(pair.qa, &wr, &bad), EINVAL) << "above Apple's message size";
  ibv_qp* fresh = a.qp();
  EXPECT_EQ(a.post_send(fresh, 0, 64), EINVAL) << "not in RTS";
  EXPECT_EQ(a.poll(a.send_cq).size(), 0u);
}

TEST_F(FakeVerbs, TheFirstBadWorkRequestOfAListIsReturnedAndTheEarlierOnesArePosted) {
  Pair pair;
  ASSERT_EQ(pair.b.post_recv(pair.qb, 0, 64, 7), 0);
  ibv_sge good = pair.a.sge(0, 64);
  ibv_send_wr second{};
  second.sg_list = &good;
  second.num_sge = 1;
  second.opcode = IBV_WR_RDMA_WRITE;
  ibv_send_wr first{};
  first.sg_list = &good;
  first.num_sge = 1;
  first.opcode = IBV_WR_SEND;
  first.next = &second;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(pair.a.api->post_send(pair.qa, &first, &bad), EINVAL);
  EXPECT_EQ(bad, &second);
  EXPECT_EQ(pair.b.poll(pair.b.recv_cq).size(), 1u);
}

TEST_F(FakeVerbs, UcPingPongThroughTheTable) {
  Pair pair;
  Port& a = pair.a;
  Port& b = pair.b;
  const uint32_t sizes[] = {0, 1, 63, 4096, 4097, 12000, 32768};
  for (int iteration = 0; iteration < 70; ++iteration) {
    const uint32_t size = sizes[iteration % 7];
    Port& from = iteration % 2 ? b : a;
    Port& to = iteration % 2 ? a : b;
    ibv_qp* qp_from = iteration % 2 ? pair.qb : pair.qa;
    ibv_qp* qp_to = iteration % 2 ? pair.qa : pair.qb;
    for (uint32_t i = 0; i < size; ++i) *from.at(i) = static_cast<uint8_t>(i * 7 + iteration);
    std::memset(to.at(32768), 0, 32768);
    const uint32_t receive_bytes = static_cast<uint32_t>(std::max<uint64_t>(1, (size + 4095) / 4096) * 4096);
    ASSERT_EQ(to.post_recv(qp_to, 32768, receive_bytes, 1000 + iteration), 0);
    ASSERT_EQ(from.post_send(qp_from, 0, size, 2000 + iteration), 0);
    const std::vector<ibv_wc> sent = from.poll(from.send_cq);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(sent[0].opcode, IBV_WC_SEND);
    EXPECT_EQ(sent[0].wr_id, 2000u + iteration);
    EXPECT_EQ(sent[0].qp_num, qp_from->qp_num);
    const std::vector<ibv_wc> received = to.poll(to.recv_cq);
    ASSERT_EQ(received.size(), 1u);
    EXPECT_EQ(received[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(received[0].opcode, IBV_WC_RECV);
    EXPECT_EQ(received[0].wr_id, 1000u + iteration);
    EXPECT_EQ(received[0].byte_len, size);
    EXPECT_EQ(received[0].qp_num, qp_to->qp_num);
    EXPECT_EQ(std::memcmp(from.at(0), to.at(32768), size), 0) << "size " << size;
  }
  EXPECT_EQ(counters().delivered, 70u);
}

TEST_F(FakeVerbs, SendAndReceiveMustCoverTheSameNumberOfFrames) {
  Pair pair;
  Port& a = pair.a;
  Port& b = pair.b;
  ASSERT_EQ(b.post_recv(pair.qb, 0, 4000, 1), 0);
  ASSERT_EQ(a.post_send(pair.qa, 0, 100), 0);
  std::vector<ibv_wc> wc = b.poll(b.recv_cq);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS) << "100 B into 4000 B: one frame each";
  ASSERT_EQ(b.post_recv(pair.qb, 0, 8192, 2), 0);
  ASSERT_EQ(a.post_send(pair.qa, 0, 4096), 0);
  wc = b.poll(b.recv_cq);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_LEN_ERR) << "1 frame into 2";
  EXPECT_EQ(pair.qb->state, IBV_QPS_ERR);
  EXPECT_EQ(counters().length_errors, 1u);
  const std::vector<ibv_wc> sent = a.poll(a.send_cq);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[1].status, IBV_WC_SUCCESS) << "UC: the sender hears nothing of it";
}

TEST_F(FakeVerbs, PermissiveNeedsOnlyTheMessageToFit) {
  reset(permissive());
  Pair pair;
  ASSERT_EQ(pair.b.post_recv(pair.qb, 0, 8192, 1), 0);
  ASSERT_EQ(pair.a.post_send(pair.qa, 0, 100), 0);
  std::vector<ibv_wc> wc = pair.b.poll(pair.b.recv_cq);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  ASSERT_EQ(pair.b.post_recv(pair.qb, 0, 8192, 2), 0);
  ASSERT_EQ(pair.a.post_send(pair.qa, 0, 8193), 0);
  wc = pair.b.poll(pair.b.recv_cq);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_LEN_ERR);
}

TEST_F(FakeVerbs, UcDropsASendThatFindsNoReceiveButTheSenderCompletes) {
  Pair pair;
  *pair.a.at(0) = 1;
  ASSERT_EQ(pair.a.post_send(pair.qa, 0, 64, 1), 0);
  *pair.a.at(0) = 2;
  ASSERT_EQ(pair.b.post_recv(pair.qb, 4096, 64, 9), 0);
  EXPECT_EQ(pair.b.poll(pair.b.recv_cq).size(), 0u) << "the earlier send is gone, not waiting";
  ASSERT_EQ(pair.a.post_send(pair.qa, 0, 64, 2), 0);
  const std::vector<ibv_wc> received = pair.b.poll(pair.b.recv_cq);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(*pair.b.at(4096), 2);
  const std::vector<ibv_wc> sent = pair.a.poll(pair.a.send_cq);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS) << "a UC send completion proves nothing";
  EXPECT_EQ(counters().dropped_no_receive, 1u);
}

TEST_F(FakeVerbs, RcKeepsASendUntilAReceiveIsPostedAndCompletesItThen) {
  reset(permissive());
  Pair pair(IBV_QPT_RC);
  *pair.a.at(0) = 42;
  ASSERT_EQ(pair.a.post_send(pair.qa, 0, 64, 1), 0);
  EXPECT_EQ(pair.a.poll(pair.a.send_cq).size(), 0u) << "not acknowledged yet";
  EXPECT_EQ(counters().queued_rc, 1u);
  ASSERT_EQ(pair.b.post_recv(pair.qb, 4096, 64, 9), 0);
  const std::vector<ibv_wc> received = pair.b.poll(pair.b.recv_cq);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(*pair.b.at(4096), 42);
  const std::vector<ibv_wc> sent = pair.a.poll(pair.a.send_cq);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].wr_id, 1u);
  EXPECT_EQ(counters().queued_rc, 0u);
}

TEST_F(FakeVerbs, PermissiveRdmaWriteNeedsARemoteWritableRegion) {
  reset(permissive());
  Pair pair(IBV_QPT_RC);
  std::memset(pair.a.at(0), 0x5a, 256);
  ibv_sge local = pair.a.sge(0, 256);
  ibv_send_wr wr{};
  wr.sg_list = &local;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(pair.b.at(1024));
  wr.wr.rdma.rkey = pair.b.mr->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(pair.a.api->post_send(pair.qa, &wr, &bad), 0);
  EXPECT_EQ(*pair.b.at(1024 + 255), 0x5a);
  std::vector<ibv_wc> sent = pair.a.poll(pair.a.send_cq);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].opcode, IBV_WC_RDMA_WRITE);
  ibv_mr* local_only = pair.b.api->reg_mr(pair.b.pd, pair.b.at(0), 512, IBV_ACCESS_LOCAL_WRITE);
  wr.wr.rdma.rkey = local_only->rkey;
  ASSERT_EQ(pair.a.api->post_send(pair.qa, &wr, &bad), 0);
  sent = pair.a.poll(pair.a.send_cq);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(FakeVerbs, UnsignaledSendsCompleteOnlyWithSqSigAll) {
  Pair quiet;
  ASSERT_EQ(quiet.a.post_send(quiet.qa, 0, 64, 1, IBV_WR_SEND, 0), 0);
  EXPECT_EQ(quiet.a.poll(quiet.a.send_cq).size(), 0u);
  reset(Options{});
  Pair loud(IBV_QPT_UC, 64, 1);
  ASSERT_EQ(loud.a.post_send(loud.qa, 0, 64, 1, IBV_WR_SEND, 0), 0);
  EXPECT_EQ(loud.a.poll(loud.a.send_cq).size(), 1u);
}

TEST_F(FakeVerbs, EverySgeMustLieInsideAnMrOfThePd) {
  Pair pair;
  Port& a = pair.a;
  ibv_sge outside{reinterpret_cast<uintptr_t>(a.at(kBufferBytes - 8)), 16, a.mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &outside;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(a.api->post_send(pair.qa, &wr, &bad), 0);
  std::vector<ibv_wc> wc = a.poll(a.send_cq);
  ASSERT_EQ(wc.size(), 1u) << "errors complete even unsignaled";
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(pair.qa->state, IBV_QPS_ERR);

  // Another PD's key, on a fresh pair.
  reset(Options{});
  Pair second;
  ibv_pd* other_pd = second.a.api->alloc_pd(second.a.context);
  std::vector<uint8_t> memory(4096);
  ibv_mr* foreign = second.a.api->reg_mr(other_pd, memory.data(), memory.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_sge wrong_pd{reinterpret_cast<uintptr_t>(memory.data()), 64, foreign->lkey};
  wr.sg_list = &wrong_pd;
  ASSERT_EQ(second.a.api->post_send(second.qa, &wr, &bad), 0);
  wc = second.a.poll(second.a.send_cq);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_PROT_ERR);

  // A receive into memory without local write fails when a message reaches it.
  ibv_mr* read_only = second.b.api->reg_mr(second.b.pd, second.b.at(0), 4096, 0);
  ibv_sge into{reinterpret_cast<uintptr_t>(second.b.at(0)), 4096, read_only->lkey};
  ibv_recv_wr recv{};
  recv.sg_list = &into;
  recv.num_sge = 1;
  ibv_recv_wr* bad_recv = nullptr;
  ASSERT_EQ(second.b.api->post_recv(second.qb, &recv, &bad_recv), 0);
  ibv_qp* sender = second.a.qp();
  connect(second.a.api, sender, second.b.gid(), second.qb->qp_num);
  ASSERT_EQ(second.a.post_send(sender, 0, 64), 0);
  wc = second.b.poll(second.b.recv_cq);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_PROT_ERR);
}

TEST_F(FakeVerbs, OutstandingReceivesAreLimitedInCountAndIn4KiBFrames) {
  Pair pair;
  for (int i = 0; i < 32; ++i) ASSERT_EQ(pair.b.post_recv(pair.qb, 0, 64, i), 0) << i;
  EXPECT_EQ(pair.b.post_recv(pair.qb, 0, 64, 32), ENOMEM) << "the 33rd outstanding receive";
  ASSERT_EQ(pair.a.post_send(pair.qa, 0, 64), 0);
  EXPECT_EQ(pair.b.post_recv(pair.qb, 0, 64, 33), 0) << "a completed receive frees its place";

  reset(Options{});
  Pair frames(IBV_QPT_UC, 8);
  ASSERT_EQ(frames.b.post_recv(frames.qb, 0, 12288), 0);
  ASSERT_EQ(frames.b.post_recv(frames.qb, 0, 12288), 0);
  EXPECT_EQ(frames.b.post_recv(frames.qb, 0, 12288), ENOMEM) << "9 frames in an 8-deep queue";
  EXPECT_EQ(frames.b.post_recv(frames.qb, 0, 8192), 0) << "8 frames fit";
}

TEST_F(FakeVerbs, ErrorStateFlushesReceivesAndLaterPosts) {
  Pair pair;
  ASSERT_EQ(pair.b.post_recv(pair.qb, 0, 64, 5), 0);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(pair.b.api->modify_qp(pair.qb, &attr, IBV_QP_STATE), 0);
  std::vector<ibv_wc> wc = pair.b.poll(pair.b.recv_cq);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wc[0].wr_id, 5u);
  ASSERT_EQ(pair.b.post_send(pair.qb, 0, 64, 6), 0);
  wc = pair.b.poll(pair.b.send_cq);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_WR_FLUSH_ERR);
}

TEST_F(FakeVerbs, DroppedSendsAreLostSilently) {
  Pair pair;
  drop_next_sends(2);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(pair.b.post_recv(pair.qb, 0, 64, i), 0);
    *pair.a.at(0) = static_cast<uint8_t>(i);
    ASSERT_EQ(pair.a.post_send(pair.qa, 0, 64, i), 0);
  }
  const std::vector<ibv_wc> received = pair.b.poll(pair.b.recv_cq);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].wr_id, 0u) << "the first receive got the third message";
  EXPECT_EQ(*pair.b.at(0), 2);
  const std::vector<ibv_wc> sent = pair.a.poll(pair.a.send_cq);
  ASSERT_EQ(sent.size(), 3u);
  for (const ibv_wc& wc : sent) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(counters().dropped_injected, 2u);
}

TEST_F(FakeVerbs, CorruptedSendsArriveWithOneByteFlipped) {
  Pair pair;
  for (int i = 0; i < 1000; ++i) *pair.a.at(i) = static_cast<uint8_t>(i);
  corrupt_next_sends(1);
  for (int round = 0; round < 2; ++round) {
    ASSERT_EQ(pair.b.post_recv(pair.qb, 4096, 1000), 0);
    ASSERT_EQ(pair.a.post_send(pair.qa, 0, 1000), 0);
    int differing = 0;
    for (int i = 0; i < 1000; ++i) differing += *pair.a.at(i) != *pair.b.at(4096 + i);
    EXPECT_EQ(differing, round == 0 ? 1 : 0) << "round " << round;
    const std::vector<ibv_wc> wc = pair.b.poll(pair.b.recv_cq);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  }
  EXPECT_EQ(counters().corrupted, 1u);
}

TEST_F(FakeVerbs, AnInjectedErrorCompletionFailsTheSendAndTheQp) {
  Pair pair;
  ASSERT_EQ(pair.b.post_recv(pair.qb, 0, 64, 1), 0);
  fail_next_send_completion(IBV_WC_RETRY_EXC_ERR);
  ASSERT_EQ(pair.a.post_send(pair.qa, 0, 64, 7, IBV_WR_SEND, 0), 0);
  const std::vector<ibv_wc> sent = pair.a.poll(pair.a.send_cq);
  ASSERT_EQ(sent.size(), 1u) << "unsignaled, but errors always complete";
  EXPECT_EQ(sent[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(sent[0].wr_id, 7u);
  EXPECT_EQ(pair.qa->state, IBV_QPS_ERR);
  EXPECT_EQ(pair.b.poll(pair.b.recv_cq).size(), 0u) << "nothing arrived";
}

TEST_F(FakeVerbs, AnInjectedCreateQpFailureHitsOnce) {
  Port port;
  fail_next_create_qp(EBUSY);
  errno = 0;
  EXPECT_EQ(port.qp(), nullptr);
  EXPECT_EQ(errno, EBUSY);
  EXPECT_NE(port.qp(), nullptr);
}

TEST_F(FakeVerbs, AVanishedPeerSaysNothingAtAll) {
  Pair pair;
  ASSERT_EQ(pair.a.post_recv(pair.qa, 0, 64, 1), 0);
  ASSERT_EQ(pair.a.post_recv(pair.qa, 0, 64, 11), 0);
  ASSERT_EQ(pair.b.post_recv(pair.qb, 0, 64, 2), 0);
  ASSERT_EQ(pair.b.post_send(pair.qb, 4096, 64, 3), 0);  // its completion is lost with it
  vanish(pair.b.context);
  ASSERT_EQ(pair.a.post_send(pair.qa, 0, 64, 4), 0);
  const std::vector<ibv_wc> sent = pair.a.poll(pair.a.send_cq);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS) << "no error completion";
  EXPECT_EQ(pair.b.poll(pair.b.recv_cq).size(), 0u);
  EXPECT_EQ(pair.b.poll(pair.b.send_cq).size(), 0u);
  ASSERT_EQ(pair.b.post_send(pair.qb, 4096, 64, 5), 0);
  ASSERT_EQ(pair.a.poll(pair.a.recv_cq).size(), 1u) << "only what arrived before it vanished";
  EXPECT_EQ(pair.a.poll(pair.a.recv_cq).size(), 0u);
  EXPECT_EQ(counters().dropped_injected, 2u) << "one to it, one from it";
}

TEST_F(FakeVerbs, CqOverrunIsAnErrorOnTheNextPoll) {
  Port a(0, 4), b(0, 4);
  ibv_qp* qa = a.qp();
  ibv_qp* qb = b.qp();
  connect(a.api, qa, b.gid(), qb->qp_num);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(a.post_send(qa, 0, 64, i), 0);
  std::vector<ibv_wc> wc(8);
  ASSERT_EQ(a.api->poll_cq(a.send_cq, 2, wc.data()), 2) << "up to n";
  EXPECT_EQ(wc[0].wr_id, 0u) << "oldest first";
  EXPECT_EQ(wc[1].wr_id, 1u);
  for (int i = 4; i < 7; ++i) ASSERT_EQ(a.post_send(qa, 0, 64, i), 0);  // 5 completions, 4 entries
  EXPECT_LT(a.api->poll_cq(a.send_cq, 8, wc.data()), 0);
  EXPECT_LT(a.api->poll_cq(a.send_cq, 8, wc.data()), 0) << "the CQ stays broken";
}

TEST_F(FakeVerbs, ResourcesInUseCannotBeFreed) {
  Port port;
  ibv_qp* qp = port.qp();
  EXPECT_EQ(port.api->destroy_cq(port.send_cq), EBUSY);
  EXPECT_EQ(port.api->dealloc_pd(port.pd), EBUSY);
  ASSERT_EQ(port.api->destroy_qp(qp), 0);
  EXPECT_EQ(port.api->destroy_cq(port.send_cq), 0);
  EXPECT_EQ(port.api->dealloc_pd(port.pd), EBUSY) << "the MR";
  ASSERT_EQ(port.api->dereg_mr(port.mr), 0);
  EXPECT_EQ(port.api->dealloc_pd(port.pd), 0);
  EXPECT_EQ(port.api->close_device(port.context), 0);
  EXPECT_EQ(live_qps(port.context), -1);
}

TEST_F(FakeVerbs, CountsCallsPerFunction) {
  Pair pair;
  clear_calls();
  ASSERT_EQ(pair.b.post_recv(pair.qb, 0, 64), 0);
  ASSERT_EQ(pair.a.post_send(pair.qa, 0, 64), 0);
  pair.a.poll(pair.a.send_cq);
  pair.b.poll(pair.b.recv_cq);
  const std::map<std::string, uint64_t> expected = {{"post_recv", 1}, {"post_send", 1}, {"poll_cq", 2}};
  EXPECT_EQ(calls(), expected);
}

// Two ranks as threads, each sending to the other while polling, with credits so UC drops nothing.
TEST_F(FakeVerbs, TwoThreadsSendBothWaysWhilePolling) {
  Pair pair;
  constexpr int kMessages = 3000;
  constexpr int kWindow = 16;
  std::atomic<int> credits[2] = {0, 0};  // sends rank i may post
  std::atomic<int> errors{0};
  auto rank = [&](int me, Port& port, ibv_qp* qp) {
    const int peer = 1 - me;
    int posted = 0, received = 0, sent = 0, send_completions = 0;
    std::vector<ibv_wc> wc(32);
    while (received < kMessages || send_completions < kMessages) {
      if (posted < kMessages && posted - received < kWindow) {
        const size_t slot = 4096 + 64 * (posted % kWindow);
        if (port.post_recv(qp, slot, 8, posted) != 0) ++errors;
        ++posted;
        ++credits[peer];
      }
      if (sent < kMessages && credits[me].load() > 0) {
        --credits[me];
        const uint64_t value = (static_cast<uint64_t>(me) << 32) | static_cast<uint64_t>(sent);
        std::memcpy(port.at(8 * (sent % 64)), &value, 8);
        if (port.post_send(qp, 8 * (sent % 64), 8, sent) != 0) ++errors;
        ++sent;
      }
      int n = port.api->poll_cq(port.recv_cq, 32, wc.data());
      for (int i = 0; i < n; ++i) {
        uint64_t value = 0;
        std::memcpy(&value, port.at(4096 + 64 * (wc[i].wr_id % kWindow)), 8);
        const uint64_t expected = (static_cast<uint64_t>(peer) << 32) | static_cast<uint64_t>(received);
        if (wc[i].status != IBV_WC_SUCCESS || wc[i].wr_id != static_cast<uint64_t>(received) || value != expected) {
          ++errors;
        }
        ++received;
      }
      if (n < 0) ++errors;
      n = port.api->poll_cq(port.send_cq, 32, wc.data());
      if (n < 0) ++errors;
      send_completions += std::max(n, 0);
      if (errors.load() > 0) return;
    }
  };
  std::thread a(rank, 0, std::ref(pair.a), pair.qa);
  std::thread b(rank, 1, std::ref(pair.b), pair.qb);
  a.join();
  b.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(counters().delivered, 2u * kMessages);
  EXPECT_EQ(counters().dropped_no_receive, 0u);
}

}  // namespace
}  // namespace tbcoll::ibverbs::fake
