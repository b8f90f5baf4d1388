// The fake verbs provider (tests/fake_verbs), control path: devices, ports, GIDs, the QP and MR budgets, QP
// creation and the modify_qp rules rxe applies. Each test fails if its rule were not enforced.
#include "fake_verbs/fake_verbs.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "fake_verbs/test_support.h"

namespace tbcoll::ibverbs::fake {
namespace {

using namespace test_support;  // NOLINT(google-build-using-namespace)

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

TEST_F(FakeVerbs, AnInjectedCreateQpFailureHitsOnce) {
  Port port;
  fail_next_create_qp(EBUSY);
  errno = 0;
  EXPECT_EQ(port.qp(), nullptr);
  EXPECT_EQ(errno, EBUSY);
  EXPECT_NE(port.qp(), nullptr);
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

}  // namespace
}  // namespace tbcoll::ibverbs::fake
