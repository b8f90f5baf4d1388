// The fake verbs provider (tests/fake_verbs), data path: what posts are allowed, delivery and frame matching, UC
// drops and RC queueing, completions, every injected fault, a UC ping-pong through the table and two threads sending
// both ways. Each test fails if its rule were not enforced.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "fake_verbs/fake_verbs.h"
#include "fake_verbs/test_support.h"

namespace tbcoll::ibverbs::fake {
namespace {

using namespace test_support;  // NOLINT(google-build-using-namespace)

TEST_F(FakeVerbs, StrictReceivesArePostedOnlyInRts) {
  Port a, b;
  ibv_qp* qa = a.qp();
  ibv_qp* qb = b.qp();
  EXPECT_EQ(a.post_recv(qa, 0, 4096), -EINVAL) << "RESET";
  ASSERT_EQ(to_init(a.api, qa), 0);
  EXPECT_EQ(a.post_recv(qa, 0, 4096), -EINVAL) << "INIT";
  ibv_qp_attr rtr = rtr_attr(b.gid(), qb->qp_num);
  ASSERT_EQ(a.api->modify_qp(qa, &rtr, rtr_mask(qa)), 0);
  EXPECT_EQ(a.post_recv(qa, 0, 4096), -EINVAL) << "RTR";
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
  EXPECT_EQ(a.post_send(pair.qa, 0, 64, 0, IBV_WR_RDMA_WRITE), -EINVAL);
  EXPECT_EQ(a.post_send(pair.qa, 0, 64, 0, IBV_WR_SEND_WITH_IMM), -EINVAL);
  EXPECT_EQ(a.post_send(pair.qa, 0, 64, 0, IBV_WR_RDMA_READ), -EINVAL);
  EXPECT_EQ(a.post_send(pair.qa, 0, 64, 0, IBV_WR_SEND, IBV_SEND_SIGNALED | IBV_SEND_INLINE), -EINVAL);
  ibv_sge two[2] = {a.sge(0, 8), a.sge(8, 8)};
  ibv_send_wr wr{};
  wr.sg_list = two;
  wr.num_sge = 2;
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(a.api->post_send(pair.qa, &wr, &bad), -EINVAL);
  EXPECT_EQ(bad, &wr);
  ibv_sge huge{reinterpret_cast<uintptr_t>(a.at(0)), 16773121, a.mr->lkey};
  wr.sg_list = &huge;
  wr.num_sge = 1;
  EXPECT_EQ(a.api->post_send(pair.qa, &wr, &bad), -EINVAL) << "above Apple's message size";
  ibv_qp* fresh = a.qp();
  EXPECT_EQ(a.post_send(fresh, 0, 64), -EINVAL) << "not in RTS";
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
  EXPECT_EQ(pair.a.api->post_send(pair.qa, &first, &bad), -EINVAL);
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
    EXPECT_EQ(received[0].byte_len, receive_bytes) << "strict: rounded up to whole frames, as Apple's might be";
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
  ibv_sge outside{reinterpret_cast<uintptr_t>(a.at(kBufferBytes - 4096)), 8192, a.mr->lkey};  // (frame-aligned)
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
  RegisteredMemory memory(4096);
  ibv_mr* foreign = second.a.api->reg_mr(other_pd, memory.data(), memory.size(), kAccessFlags);
  ibv_sge wrong_pd{reinterpret_cast<uintptr_t>(memory.data()), 64, foreign->lkey};
  wr.sg_list = &wrong_pd;
  ASSERT_EQ(second.a.api->post_send(second.qa, &wr, &bad), 0);
  wc = second.a.poll(second.a.send_cq);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_PROT_ERR);

  // A receive into memory without local write fails when a message reaches it (RoCE registers such memory; Apple
  // refuses the registration itself).
  reset(permissive());
  Pair third;
  ibv_mr* read_only = third.b.api->reg_mr(third.b.pd, third.b.at(0), 4096, 0);
  ibv_sge into{reinterpret_cast<uintptr_t>(third.b.at(0)), 4096, read_only->lkey};
  ibv_recv_wr recv{};
  recv.sg_list = &into;
  recv.num_sge = 1;
  ibv_recv_wr* bad_recv = nullptr;
  ASSERT_EQ(third.b.api->post_recv(third.qb, &recv, &bad_recv), 0);
  ibv_qp* sender = third.a.qp();
  connect(third.a.api, sender, third.b.gid(), third.qb->qp_num);
  ASSERT_EQ(third.a.post_send(sender, 0, 64), 0);
  wc = third.b.poll(third.b.recv_cq);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_PROT_ERR);
}

TEST_F(FakeVerbs, OutstandingReceivesAreLimitedInCountAndIn4KiBFrames) {
  Pair pair;
  for (int i = 0; i < 32; ++i) ASSERT_EQ(pair.b.post_recv(pair.qb, 0, 64, i), 0) << i;
  EXPECT_EQ(pair.b.post_recv(pair.qb, 0, 64, 32), -ENOMEM) << "the 33rd outstanding receive";
  ASSERT_EQ(pair.a.post_send(pair.qa, 0, 64), 0);
  EXPECT_EQ(pair.b.post_recv(pair.qb, 0, 64, 33), 0) << "a completed receive frees its place";

  reset(Options{});
  Pair frames(IBV_QPT_UC, 8);
  ASSERT_EQ(frames.b.post_recv(frames.qb, 0, 12288), 0);
  ASSERT_EQ(frames.b.post_recv(frames.qb, 0, 12288), 0);
  EXPECT_EQ(frames.b.post_recv(frames.qb, 0, 12288), -ENOMEM) << "9 frames in an 8-deep queue";
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
        const size_t from = 32768 + 4096 * (sent % 8);  // frame-aligned, as the strict fabric wants a source
        std::memcpy(port.at(from), &value, 8);
        if (port.post_send(qp, from, 8, sent) != 0) ++errors;
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

// Ranks that share one process-wide context (the transport's per-process sharing) talk through its own GID.
TEST_F(FakeVerbs, TwoQpsOfOneContextReachEachOther) {
  Port port;
  ibv_qp* first = port.qp();
  ibv_qp* second = port.qp();
  connect(port.api, first, port.gid(), second->qp_num);
  connect(port.api, second, port.gid(), first->qp_num);
  *port.at(0) = 77;
  ASSERT_EQ(port.post_recv(second, 8192, 64, 1), 0);
  ASSERT_EQ(port.post_send(first, 0, 64, 2), 0);
  const std::vector<ibv_wc> received = port.poll(port.recv_cq);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].qp_num, second->qp_num);
  EXPECT_EQ(received[0].src_qp, first->qp_num);
  EXPECT_EQ(*port.at(8192), 77);
}

TEST_F(FakeVerbs, SendWorkRequestsHoldTheirPlacesUntilAPolledCompletion) {
  Pair pair(IBV_QPT_UC, 4);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(pair.a.post_send(pair.qa, 0, 64, i, IBV_WR_SEND, 0), 0) << i;
  ASSERT_EQ(pair.a.post_send(pair.qa, 0, 64, 3), 0);
  EXPECT_EQ(pair.a.post_send(pair.qa, 0, 64, 4), -ENOMEM) << "4 WRs in a 4-deep send queue, none polled";
  ASSERT_EQ(pair.a.poll(pair.a.send_cq).size(), 1u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(pair.a.post_send(pair.qa, 0, 64, 5 + i, IBV_WR_SEND, 0), 0) << i;
  EXPECT_EQ(pair.a.post_send(pair.qa, 0, 64, 9, IBV_WR_SEND, 0), -ENOMEM) << "only unsignaled: never freed";

  reset(Options{});
  Pair frames(IBV_QPT_UC, 4);
  ASSERT_EQ(frames.a.post_send(frames.qa, 0, 12288, 1), 0);
  EXPECT_EQ(frames.a.post_send(frames.qa, 0, 8192, 2), -ENOMEM) << "3 + 2 frames in a 4-deep queue";
  ASSERT_EQ(frames.a.post_send(frames.qa, 0, 100, 3), 0);
}

TEST_F(FakeVerbs, PermissiveSendWithImmediateCarriesItDirectOrQueued) {
  reset(permissive());
  Pair pair(IBV_QPT_RC);
  ibv_sge list = pair.a.sge(0, 16);
  ibv_send_wr wr{};
  wr.sg_list = &list;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.imm_data = 0x1234;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(pair.a.api->post_send(pair.qa, &wr, &bad), 0);  // queued: no receive yet
  ASSERT_EQ(pair.b.post_recv(pair.qb, 0, 64, 1), 0);
  wr.imm_data = 0x5678;
  ASSERT_EQ(pair.b.post_recv(pair.qb, 0, 64, 2), 0);
  ASSERT_EQ(pair.a.api->post_send(pair.qa, &wr, &bad), 0);  // straight into the posted receive
  const std::vector<ibv_wc> received = pair.b.poll(pair.b.recv_cq);
  ASSERT_EQ(received.size(), 2u);
  for (const ibv_wc& wc : received) EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(received[0].imm_data, 0x1234u);
  EXPECT_EQ(received[1].imm_data, 0x5678u);
}

}  // namespace
}  // namespace tbcoll::ibverbs::fake
