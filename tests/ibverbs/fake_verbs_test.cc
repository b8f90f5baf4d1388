// The fake verbs provider (tests/fake_verbs), control path: devices, ports, GIDs, the QP and MR budgets, QP
// creation and the modify_qp rules rxe applies; and the strict fabric's frame rules for a SEND (byte_len in whole
// frames, frame-aligned sources). Each test fails if its rule were not enforced.
#include "fake_verbs/fake_verbs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "fake_verbs/test_support.h"
#include "transports/ibverbs/memory.h"

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
  RegisteredMemory memory(4096);
  std::vector<ibv_mr*> mrs;
  for (int i = 1; i < 100; ++i) {
    mrs.push_back(port.api->reg_mr(port.pd, memory.data(), memory.size(), kAccessFlags));
    ASSERT_NE(mrs.back(), nullptr) << i;
  }
  EXPECT_EQ(live_mrs(port.context), 100);
  errno = 0;
  EXPECT_EQ(port.api->reg_mr(port.pd, memory.data(), memory.size(), kAccessFlags), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  ASSERT_EQ(port.api->dereg_mr(mrs.back()), 0);
  EXPECT_EQ(live_mrs(port.context), 99);
  EXPECT_NE(port.api->reg_mr(port.pd, memory.data(), memory.size(), kAccessFlags), nullptr);
  Options options = permissive();
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


// Apple's provider refuses a local-write-only registration even for SEND and RECV, and the peers register
// page-aligned memory: the strict fabric takes local write + remote read + remote write on a 16 KiB boundary.
TEST_F(FakeVerbs, StrictRegistrationsNeedApplesAccessOnA16KiBBoundary) {
  Port port;
  RegisteredMemory memory(65536);
  for (int access : {int{IBV_ACCESS_LOCAL_WRITE}, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ}) {
    errno = 0;
    EXPECT_EQ(port.api->reg_mr(port.pd, memory.data(), 4096, access), nullptr) << "access " << access;
    EXPECT_EQ(errno, EINVAL);
  }
  errno = 0;
  EXPECT_EQ(port.api->reg_mr(port.pd, memory.data() + 4096, 4096, kAccessFlags), nullptr) << "4 KiB aligned only";
  EXPECT_EQ(errno, EINVAL);
  ibv_mr* right = port.api->reg_mr(port.pd, memory.data() + 16384, 4096, kAccessFlags);
  ASSERT_NE(right, nullptr);
  EXPECT_EQ(port.api->dereg_mr(right), 0);

  reset(permissive());
  Port roce;
  ibv_mr* local_only = roce.api->reg_mr(roce.pd, memory.data() + 4096, 4096, IBV_ACCESS_LOCAL_WRITE);
  EXPECT_NE(local_only, nullptr) << "RoCE NICs take these";
}

// Apple's limits are per device: every context of one device on one host draws on the same 10 queue pairs.
TEST_F(FakeVerbs, QueuePairsAreCountedPerDeviceNotPerContext) {
  Options two;
  two.devices = 2;
  reset(two);
  set_thread_host(0);
  Port first(0), second(0), other_device(1);
  set_thread_host(-1);
  std::vector<ibv_qp*> made;
  for (int i = 0; i < 6; ++i) made.push_back(first.qp());
  for (int i = 0; i < 4; ++i) made.push_back(second.qp());
  for (ibv_qp* qp : made) ASSERT_NE(qp, nullptr);
  EXPECT_EQ(live_qps(second.context), 4);
  EXPECT_EQ(port_qps(second.context), 10) << "one device, two contexts";
  errno = 0;
  EXPECT_EQ(second.qp(), nullptr) << "the device's 11th";
  EXPECT_EQ(errno, EBUSY);
  EXPECT_EQ(std::memcmp(first.gid().raw, second.gid().raw, 16), 0) << "one port, one GID";
  EXPECT_NE(other_device.qp(), nullptr) << "another device has its own 10";
  ASSERT_EQ(first.api->destroy_qp(made.front()), 0);
  EXPECT_NE(second.qp(), nullptr);
}

// Apple's ibv_post_recv returned -12 where rdma-core returns 12: the strict fabric returns the negated code and
// leaves errno at 0, so only code that reads the return value names the error.
TEST_F(FakeVerbs, StrictPostsReturnTheNegatedCodeAndNoErrno) {
  Pair pair(IBV_QPT_UC, 2);
  ASSERT_EQ(pair.b.post_recv(pair.qb, 0, 4096), 0);
  ASSERT_EQ(pair.b.post_recv(pair.qb, 0, 4096), 0);
  errno = EAGAIN;
  EXPECT_EQ(pair.b.post_recv(pair.qb, 0, 4096), -ENOMEM);
  EXPECT_EQ(errno, 0);
  reset(permissive());
  Pair roce(IBV_QPT_UC, 2);
  ASSERT_EQ(roce.b.post_recv(roce.qb, 0, 4096), 0);
  ASSERT_EQ(roce.b.post_recv(roce.qb, 0, 4096), 0);
  EXPECT_EQ(roce.b.post_recv(roce.qb, 0, 4096), ENOMEM);
}

// The active port is whatever query_device and query_port say, not port 1.
TEST_F(FakeVerbs, TheActivePortIsTheOneTheQueriesName) {
  Options options;
  options.active_port = 2;
  reset(options);
  Port a, b;
  ibv_device_attr device{};
  ASSERT_EQ(a.api->query_device(a.context, &device), 0);
  EXPECT_EQ(device.phys_port_cnt, 2);
  ibv_port_attr attr{};
  ASSERT_EQ(a.api->query_port(a.context, 1, &attr), 0);
  EXPECT_EQ(attr.state, IBV_PORT_DOWN);
  ASSERT_EQ(a.api->query_port(a.context, 2, &attr), 0);
  EXPECT_EQ(attr.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(a.api->query_port(a.context, 3, &attr), EINVAL);
  ibv_qp* qp = a.qp();
  ibv_qp_attr init{};
  init.qp_state = IBV_QPS_INIT;
  init.port_num = 1;
  init.qp_access_flags = kAccessFlags;
  const int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  EXPECT_EQ(a.api->modify_qp(qp, &init, mask), EINVAL) << "port 1 is down";
  init.port_num = 2;
  EXPECT_EQ(a.api->modify_qp(qp, &init, mask), 0);
}

// Cabled: a Thunderbolt port reaches only the Mac at the other end of its cable, on the cable's own subnet.
TEST_F(FakeVerbs, CabledPortsReachOnlyTheirCablesOtherEnd) {
  Options options;
  options.devices = 2;
  options.cables = {{0, 0, 1, 0}, {0, 1, 2, 0}};  // host 0's en0 to host 1's en0, host 0's en1 to host 2's en0
  reset(options);
  set_thread_host(0);
  Port zero_to_one(0), zero_to_two(1);
  set_thread_host(1);
  Port one(0);
  set_thread_host(2);
  Port two(0);
  set_thread_host(-1);
  const uint8_t a0[4] = {10, 77, 0, 1}, b0[4] = {10, 77, 0, 2}, a1[4] = {10, 77, 1, 1};
  EXPECT_EQ(std::memcmp(zero_to_one.gid().raw + 12, a0, 4), 0);
  EXPECT_EQ(std::memcmp(one.gid().raw + 12, b0, 4), 0);
  EXPECT_EQ(std::memcmp(zero_to_two.gid().raw + 12, a1, 4), 0);
  EXPECT_EQ(one.api->ipv4_prefix(a0), 30);
  const uint8_t elsewhere[4] = {10, 9, 0, 1};
  EXPECT_EQ(one.api->ipv4_prefix(elsewhere), -1);

  ibv_qp* qp = zero_to_one.qp();
  ibv_qp* wrong_peer = two.qp();
  ASSERT_EQ(to_init(zero_to_one.api, qp), 0);
  ibv_qp_attr rtr = rtr_attr(two.gid(), wrong_peer->qp_num);
  EXPECT_EQ(zero_to_one.api->modify_qp(qp, &rtr, rtr_mask(qp)), ETIMEDOUT) << "host 2 is not across this cable";
  ibv_qp* right_peer = one.qp();
  rtr = rtr_attr(one.gid(), right_peer->qp_num);
  EXPECT_EQ(zero_to_one.api->modify_qp(qp, &rtr, rtr_mask(qp)), 0);
  ibv_qp_attr rts = rts_attr();
  ASSERT_EQ(zero_to_one.api->modify_qp(qp, &rts, rts_mask(qp)), 0);
  connect(one.api, right_peer, zero_to_one.gid(), qp->qp_num);
  ASSERT_EQ(one.post_recv(right_peer, 0, 64), 0);
  ASSERT_EQ(zero_to_one.post_send(qp, 0, 64), 0);
  EXPECT_EQ(counters().per_cable, (std::vector<uint64_t>{1, 0}));

  // A port on no cable is down: its Mac sees no RDMA peer there.
  Options lonely = options;
  lonely.cables = {{0, 0, 1, 0}};
  reset(lonely);
  set_thread_host(0);
  const VerbsApi* api = verbs();
  ibv_device** list = api->get_device_list(nullptr);
  ibv_context* uncabled = api->open_device(list[1]);
  api->free_device_list(list);
  set_thread_host(-1);
  ibv_port_attr attr{};
  ASSERT_EQ(api->query_port(uncabled, 1, &attr), 0);
  EXPECT_EQ(attr.state, IBV_PORT_DOWN);
  EXPECT_EQ(api->alloc_pd(uncabled), nullptr);
  EXPECT_EQ(api->close_device(uncabled), 0);
}

// One SEND of `sent` bytes (a pattern) from the start of a's buffer into a receive of `posted` bytes at b's
// kReceiveAt, which held 0xcc: the receive's completion, and whether b now holds the sent bytes and, after them,
// the 0xcc it held.
constexpr size_t kReceiveAt = 16384;
struct Received {
  ibv_wc wc{};
  bool exact_copy = false;
};
Received send_one(Pair& pair, uint32_t sent, uint32_t posted, uint64_t wr_id) {
  for (uint32_t i = 0; i < sent; ++i) *pair.a.at(i) = static_cast<uint8_t>(i * 13 + 1);
  std::memset(pair.b.at(kReceiveAt), 0xcc, posted);
  Received received;
  EXPECT_EQ(pair.b.post_recv(pair.qb, kReceiveAt, posted, wr_id), 0);
  EXPECT_EQ(pair.a.post_send(pair.qa, 0, sent, wr_id), 0);
  EXPECT_EQ(pair.a.poll(pair.a.send_cq).size(), 1u);
  const std::vector<ibv_wc> wc = pair.b.poll(pair.b.recv_cq);
  EXPECT_EQ(wc.size(), 1u);
  if (wc.size() != 1) return received;
  received.wc = wc[0];
  const uint8_t* into = pair.b.at(kReceiveAt);
  received.exact_copy = std::memcmp(pair.a.at(0), into, sent) == 0 &&
                        std::all_of(into + sent, into + posted, [](uint8_t byte) { return byte == 0xcc; });
  return received;
}

// Apple's provider might report a receive's byte_len in whole 4 KiB frames (Options::round_byte_len, on by
// default): strict, byte_len is the sent length rounded up to frames, at least one, never beyond the posted
// receive, and only the sent bytes are copied. Strict with the option off, and permissive, report the sent length.
TEST_F(FakeVerbs, StrictReceivesReportByteLenInWholeFramesCappedAtTheReceive) {
  EXPECT_TRUE(Options{}.round_byte_len);
  // Strict, a message and its receive span the same frames, so the rounded length capped at the receive is the
  // receive's own length: a receiver learns nothing from byte_len.
  struct Case {
    uint32_t sent, posted;
  };
  const Case cases[] = {{0, 0},       {0, 4096},    {1, 4096},    {100, 4000},   {4095, 4096},
                        {4096, 4096}, {4097, 8192}, {5000, 6000}, {12000, 12288}};
  Options exact;
  exact.round_byte_len = false;
  const struct {
    const char* name;
    Options options;
    bool rounds;
  } modes[] = {
      {"strict", Options{}, true}, {"strict, round_byte_len off", exact, false}, {"permissive", permissive(), false}};
  for (const auto& mode : modes) {
    SCOPED_TRACE(mode.name);
    reset(mode.options);
    Pair pair;
    uint64_t wr_id = 1;
    for (const Case& c : cases) {
      const Received received = send_one(pair, c.sent, c.posted, wr_id++);
      EXPECT_EQ(received.wc.status, IBV_WC_SUCCESS) << "sent " << c.sent;
      EXPECT_EQ(received.wc.byte_len, mode.rounds ? c.posted : c.sent) << "sent " << c.sent << " into " << c.posted;
      EXPECT_TRUE(received.exact_copy) << "sent " << c.sent << ": the sent bytes, and nothing past them";
    }
  }
}

// Apple's stack might refuse a SEND whose source is not frame-aligned (Options::aligned_sends, on by default):
// strict, post_send refuses an SGE address that is not a multiple of 4 KiB as its other refusals do (the negated
// EINVAL, errno 0, *bad the WR, earlier WRs of the list posted). Strict with the option off, and permissive, send
// from anywhere in the MR.
TEST_F(FakeVerbs, StrictSendsComeFromFrameAlignedAddresses) {
  EXPECT_TRUE(Options{}.aligned_sends);
  Pair pair;
  Port& a = pair.a;
  ASSERT_EQ(pair.b.post_recv(pair.qb, kReceiveAt, 4096, 1), 0);
  for (size_t offset : {size_t{100}, size_t{2048}, size_t{4095}}) {
    errno = EAGAIN;
    EXPECT_EQ(a.post_send(pair.qa, offset, 64), -EINVAL) << "from offset " << offset;
    EXPECT_EQ(errno, 0);
  }
  EXPECT_EQ(a.poll(a.send_cq).size(), 0u) << "a refused WR does not complete";
  EXPECT_EQ(counters().delivered, 0u);
  EXPECT_EQ(a.post_send(pair.qa, 4096, 64), 0) << "a frame boundary, though not a 16 KiB page's";
  EXPECT_EQ(counters().delivered, 1u);

  ASSERT_EQ(pair.b.post_recv(pair.qb, kReceiveAt, 4096, 2), 0);
  ibv_sge aligned = a.sge(8192, 64), unaligned = a.sge(8192 + 64, 64);
  ibv_send_wr second{};
  second.sg_list = &unaligned;
  second.num_sge = 1;
  second.opcode = IBV_WR_SEND;
  ibv_send_wr first = second;
  first.sg_list = &aligned;
  first.next = &second;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(a.api->post_send(pair.qa, &first, &bad), -EINVAL);
  EXPECT_EQ(bad, &second);
  EXPECT_EQ(counters().delivered, 2u) << "the list's first WR went";

  Options anywhere;
  anywhere.aligned_sends = false;
  for (const Options& options : {anywhere, permissive()}) {
    SCOPED_TRACE(options.apple_strict ? "strict, aligned_sends off" : "permissive");
    reset(options);
    Pair relaxed;
    std::memset(relaxed.a.at(100), 0x5a, 64);
    ASSERT_EQ(relaxed.b.post_recv(relaxed.qb, kReceiveAt, 4096, 1), 0);
    EXPECT_EQ(relaxed.a.post_send(relaxed.qa, 100, 64), 0);
    EXPECT_EQ(relaxed.b.poll(relaxed.b.recv_cq).size(), 1u);
    EXPECT_EQ(std::memcmp(relaxed.b.at(kReceiveAt), relaxed.a.at(100), 64), 0);
  }
}

}  // namespace
}  // namespace tbcoll::ibverbs::fake
