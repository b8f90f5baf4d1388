// One conformance suite, run for every transport: ordering, sizes, non-blocking test(), mismatch
// detection, aborts, and capability flags that match behaviour.
#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <thread>

#include "collectives/harness.h"
#include "common/time.h"
#include "tbcoll/transport.hpp"

namespace tbcoll::transport {
namespace {

std::shared_ptr<Device> find_device(const std::string& name) {
  for (auto& device : available_devices()) {
    if (device->name() == name) return device;
  }
  return nullptr;
}

// Two contexts connected to each other from two threads; endpoints[0] is rank 0's endpoint to rank 1.
struct Pair {
  std::unique_ptr<Context> contexts[2];
  std::unique_ptr<Endpoint> endpoints[2];
};

// Context arguments of rank r of a 2-rank communicator whose ranks are threads of this process (as a
// communicator fills them: each rank its own identity).
ContextArgs args_of(int r, uint64_t comm_id) {
  ContextArgs args{r, 2, "conformance", "127.0.0.1", comm_id, 10};
  args.self = {r, "conformance-host", 4242, r};
  return args;
}

Pair connect_pair(Device& device, uint64_t comm_id) {
  Pair pair;
  for (int r = 0; r < 2; ++r) pair.contexts[r] = device.create_context(args_of(r, comm_id));
  // As a communicator sets up: round 1 (address), round 2 (address_for) where the device asks for it.
  PeerAddress to[2] = {{1, pair.contexts[1]->address()}, {0, pair.contexts[0]->address()}};  // to[r]: r's peer
  if (device.capabilities().per_peer_addresses) {
    std::string for_peer[2] = {pair.contexts[0]->address_for(to[0]), pair.contexts[1]->address_for(to[1])};
    to[0].for_me = for_peer[1];
    to[1].for_me = for_peer[0];
  }
  auto deadline = deadline_after(10);
  auto other = std::async(std::launch::async, [&] { return pair.contexts[1]->connect({to[1]}, deadline); });
  auto mine = pair.contexts[0]->connect({to[0]}, deadline);
  auto theirs = other.get();
  pair.endpoints[0] = std::move(mine.at(0));
  pair.endpoints[1] = std::move(theirs.at(0));
  return pair;
}

void wait(Request& request) {
  auto deadline = deadline_after(10);
  while (!request.test()) {
    ASSERT_LT(Clock::now(), deadline) << "request did not complete";
    request.block(std::chrono::microseconds(1000));
  }
}

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    device_ = find_device(GetParam());
    if (!device_) GTEST_SKIP() << GetParam() << " transport not built";
    static uint64_t comm_id = 1000;
    pair_ = connect_pair(*device_, ++comm_id);
  }
  std::shared_ptr<Device> device_;
  Pair pair_;
};

TEST_P(Conformance, PeerRanksAreReported) {
  EXPECT_EQ(pair_.endpoints[0]->peer(), 1);
  EXPECT_EQ(pair_.endpoints[1]->peer(), 0);
}

TEST_P(Conformance, MessagesOfManySizesArriveIntactAndInOrder) {
  std::vector<size_t> sizes = {0, 1, 31, 32, 33, 4096, 16383, 16384, 65537, 3 << 20};
  std::vector<std::vector<uint8_t>> sent, got;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<uint8_t> data(sizes[i]);
    for (size_t j = 0; j < data.size(); ++j) data[j] = static_cast<uint8_t>(j * 31 + i);
    sent.push_back(data);
    got.emplace_back(sizes[i], 0);
  }
  std::vector<std::unique_ptr<Request>> requests;
  // Receives posted before and after the sends, both directions at once.
  for (size_t i = 0; i < sizes.size(); ++i) requests.push_back(pair_.endpoints[1]->irecv(got[i].data(), sizes[i], {7, i}));
  for (size_t i = 0; i < sizes.size(); ++i) requests.push_back(pair_.endpoints[0]->isend(sent[i].data(), sizes[i], {7, i}));
  std::vector<uint8_t> back(1000), reply(1000, 9);
  requests.push_back(pair_.endpoints[1]->isend(reply.data(), reply.size(), {8, 0}));
  requests.push_back(pair_.endpoints[0]->irecv(back.data(), back.size(), {8, 0}));
  // Progress everything round-robin, as a communicator does.
  auto deadline = deadline_after(20);
  bool all_done = false;
  while (!all_done) {
    all_done = true;
    for (auto& request : requests) all_done &= request->test();
    ASSERT_LT(Clock::now(), deadline);
  }
  for (size_t i = 0; i < sizes.size(); ++i) EXPECT_EQ(got[i], sent[i]) << "message " << i << " of " << sizes[i] << " B";
  EXPECT_EQ(back, reply);
}

// isend_later: in order with the other sends; alone it leaves at flush(), several at once on their own, and what
// is left leaves as the endpoint is destroyed (a peer may be waiting for it).
TEST_P(Conformance, LaterSendsKeepTheirPlaceAndLeave) {
  std::vector<uint8_t> data(300, 7), got(300);
  uint8_t none = 0;
  std::vector<std::unique_ptr<Request>> requests;
  requests.push_back(pair_.endpoints[1]->irecv(&none, 0, {1, 0x11}));
  requests.push_back(pair_.endpoints[1]->irecv(got.data(), got.size(), {2, 0x22}));
  requests.push_back(pair_.endpoints[0]->isend_later({1, 0x11}));
  requests.push_back(pair_.endpoints[0]->isend(data.data(), data.size(), {2, 0x22}));
  for (auto& request : requests) wait(*request);
  EXPECT_EQ(got, data) << "a later send and the send behind it";

  auto alone = pair_.endpoints[1]->irecv(&none, 0, {3, 0x33});
  auto later = pair_.endpoints[0]->isend_later({3, 0x33});
  pair_.endpoints[0]->flush();
  wait(*alone);
  wait(*later);

  std::vector<std::unique_ptr<Request>> many, received;
  for (uint64_t i = 0; i < 20; ++i) received.push_back(pair_.endpoints[1]->irecv(&none, 0, {10 + i, 0x44}));
  for (uint64_t i = 0; i < 20; ++i) many.push_back(pair_.endpoints[0]->isend_later({10 + i, 0x44}));
  for (size_t i = 0; i < 16; ++i) wait(*received[i]);  // without a flush: enough of them leave on their own
  for (size_t i = 0; i < 16; ++i) wait(*many[i]);

  std::vector<std::unique_ptr<Request>> last;
  last.push_back(pair_.endpoints[1]->irecv(&none, 0, {40, 0x55}));
  auto unsent = pair_.endpoints[0]->isend_later({40, 0x55});
  EXPECT_NO_THROW(unsent->test());
  unsent.reset();  // dropped before it left: the endpoint may call its stream out of sync, not crash
  if (GetParam() == "tcp") {
    many.clear();                 // the rest of the 20 were sent with the first ones or left waiting
    pair_.endpoints[0].reset();   // destroyed: what waits leaves first
    for (size_t i = 16; i < 20; ++i) wait(*received[i]);
  }
}

// probe() tells the next message's tag and size without taking it, never a message a posted receive takes, and
// never blocks: what a receive from any source picks its peer by.
TEST_P(Conformance, ProbeTellsTheNextMessageWithoutTakingIt) {
  Endpoint& from = *pair_.endpoints[0];
  Endpoint& to = *pair_.endpoints[1];
  EXPECT_FALSE(to.probe()) << "nothing was sent";
  const std::vector<uint8_t> small(5, 7);
  std::vector<uint8_t> large(3 << 20);
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<uint8_t>(i * 13);
  auto first = from.isend(small.data(), small.size(), {p2p_tag(0), 11});
  auto second = from.isend(large.data(), large.size(), {p2p_tag(1), 12});
  auto look = [&](const char* what) {
    auto deadline = deadline_after(10);
    std::optional<Arrival> seen;
    while (!(seen = to.probe())) {
      first->test();
      second->test();
      if (Clock::now() > deadline) ADD_FAILURE() << what << " never seen";
      if (Clock::now() > deadline) break;
    }
    return seen;
  };
  std::optional<Arrival> seen = look("the first message");
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->tag.tag, p2p_tag(0));
  EXPECT_EQ(seen->tag.meta, 11u);
  EXPECT_EQ(seen->bytes, small.size());
  seen = to.probe();  // looking again takes nothing
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->tag.meta, 11u);
  std::vector<uint8_t> got_small(5, 0), got_large(large.size(), 0);
  auto took_first = to.irecv(got_small.data(), got_small.size(), {p2p_tag(0), 11});
  // The first message is the posted receive's: a probe now tells nothing, or (the receive completed on the way) the
  // second message.
  seen = to.probe();
  if (seen) {
    EXPECT_EQ(seen->tag.meta, 12u);
  }
  wait(*took_first);
  EXPECT_EQ(got_small, small);
  seen = look("the second message");
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->tag.tag, p2p_tag(1));
  EXPECT_EQ(seen->bytes, large.size());
  auto took_second = to.irecv(got_large.data(), got_large.size(), {p2p_tag(1), 12});
  auto deadline = deadline_after(20);
  for (bool done = false; !done;) {  // both sides move at every turn
    const bool received = took_second->test();
    const bool sent = second->test();
    done = received && sent;
    ASSERT_LT(Clock::now(), deadline);
  }
  EXPECT_EQ(got_large, large);
  EXPECT_FALSE(to.probe()) << "both were taken";
}

TEST_P(Conformance, TestNeverBlocksWhenNothingArrived) {
  uint8_t byte = 0;
  auto request = pair_.endpoints[0]->irecv(&byte, 1, {1, 1});
  auto start = Clock::now();
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(request->test());
  request->block(std::chrono::microseconds(2000));
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(500));
  uint8_t one = 1;
  auto send = pair_.endpoints[1]->isend(&one, 1, {1, 1});
  wait(*send);
  wait(*request);
  EXPECT_EQ(byte, 1);
}

// block() sleeps while nothing can move, also when an isend_later message waits for a later send (it wants no
// room in the connection: a wait that returned at once for it would spin in system calls), and the data ends the
// sleep. Counted, not timed: a sleeping wait makes tens of calls in 30 ms, a spinning one thousands.
TEST_P(Conformance, BlockSleepsWhileOnlyADeferredSendWaits) {
  uint8_t byte = 0, none = 0;
  auto request = pair_.endpoints[0]->irecv(&byte, 1, {2, 2});
  auto later = pair_.endpoints[0]->isend_later({1, 1});
  int calls = 0;
  for (auto until = Clock::now() + std::chrono::milliseconds(30); Clock::now() < until; ++calls) {
    EXPECT_FALSE(request->test());
    request->block(std::chrono::microseconds(1000));
  }
  EXPECT_LT(calls, 300) << "block() returned at once " << calls << " times in 30 ms";
  auto checked = pair_.endpoints[1]->irecv(&none, 0, {1, 1});
  uint8_t one = 1;
  auto send = pair_.endpoints[1]->isend(&one, 1, {2, 2});
  pair_.endpoints[0]->flush();
  wait(*send);
  wait(*request);
  wait(*later);
  wait(*checked);
  EXPECT_EQ(byte, 1);
}

// A message that arrived with an earlier one (one read took both) is not slept for: 50 block() calls return
// in far less than the 50 ms that 50 sleeps of a 1 ms slice would take.
TEST_P(Conformance, BlockReturnsAtOnceForAMessageAlreadyHere) {
  uint8_t first = 0, second = 0, one = 1, two = 2;
  auto a = pair_.endpoints[1]->isend(&one, 1, {1, 1});
  auto b = pair_.endpoints[1]->isend(&two, 1, {2, 2});
  wait(*a);
  wait(*b);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // both arrived
  auto got_first = pair_.endpoints[0]->irecv(&first, 1, {1, 1});
  wait(*got_first);
  auto got_second = pair_.endpoints[0]->irecv(&second, 1, {2, 2});
  const auto start = Clock::now();
  for (int i = 0; i < 50; ++i) got_second->block(std::chrono::microseconds(1000));
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(40));
  wait(*got_second);
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 2);
}

TEST_P(Conformance, SizeAndSignatureMismatchesAreDetected) {
  std::vector<uint8_t> data(100, 1), got(100);
  auto send = pair_.endpoints[0]->isend(data.data(), 100, {5, 0xabc});
  auto recv = pair_.endpoints[1]->irecv(got.data(), 99, {5, 0xabc});
  try {
    wait(*recv);
    ADD_FAILURE() << "mismatched size accepted";
  } catch (const MismatchError& error) {
    EXPECT_EQ(error.peer(), 0);
    EXPECT_EQ(error.expected_bytes(), 99u);
    EXPECT_EQ(error.got_bytes(), 100u);
  }
  EXPECT_NE(got[0], 1) << "a mismatched message must not be copied";
}

TEST_P(Conformance, MetaMismatchIsDetected) {
  std::vector<uint8_t> data(8, 1), got(8);
  auto send = pair_.endpoints[0]->isend(data.data(), 8, {5, 0x111});
  auto recv = pair_.endpoints[1]->irecv(got.data(), 8, {5, 0x222});
  try {
    wait(*recv);
    ADD_FAILURE() << "mismatched signature accepted";
  } catch (const MismatchError& error) {
    EXPECT_EQ(error.expected_meta(), 0x222u);
    EXPECT_EQ(error.got_meta(), 0x111u);
  }
}

TEST_P(Conformance, AbortFailsThePeersPendingReceive) {
  uint8_t byte = 0;
  auto recv = pair_.endpoints[1]->irecv(&byte, 1, {1, 1});
  pair_.contexts[0]->abort();
  auto start = Clock::now();
  EXPECT_THROW(wait(*recv), IoError);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

TEST_P(Conformance, CapabilitiesMatchBehaviour) {
  Capabilities caps = device_->capabilities();
  PeerInfo self{0, "hostA", 1}, same_process{1, "hostA", 1}, other_process{1, "hostA", 2}, other_host{1, "hostB", 3};
  EXPECT_TRUE(device_->can_connect(self, same_process));
  EXPECT_EQ(device_->can_connect(self, other_process), !caps.same_process_only);
  EXPECT_EQ(device_->can_connect(self, other_host), !caps.same_host_only && !caps.same_process_only);
  EXPECT_EQ(device_->can_connect(self, other_process), device_->can_connect(other_process, self)) << "symmetric";
  EXPECT_GT(caps.latency_us, 0);
  EXPECT_GT(caps.bandwidth_gbps, 0);
}

// The core's schedules need reliable, ordered endpoints (transport.h), and pass user buffers as they are.
TEST_P(Conformance, GuaranteesTheCoreNeedsAreClaimedAndHold) {
  const Capabilities caps = device_->capabilities();
  EXPECT_TRUE(caps.reliable);
  EXPECT_TRUE(caps.ordered);
  EXPECT_GE(caps.max_message_bytes, size_t{1} << 20) << "a limit this small is legal, but no built-in transport has it";
  // Unaligned buffers at odd offsets, on the stack: no registration, no alignment needed (or the transport copies).
  alignas(64) uint8_t out[131], in[131] = {};
  for (int i = 0; i < 131; ++i) out[i] = static_cast<uint8_t>(i * 7 + 1);
  auto recv = pair_.endpoints[1]->irecv(in + 3, 127, {3, 3});
  auto send = pair_.endpoints[0]->isend(out + 1, 127, {3, 3});
  wait(*send);
  wait(*recv);
  EXPECT_EQ(0, std::memcmp(in + 3, out + 1, 127));
  if (!caps.per_peer_addresses) {
    EXPECT_EQ(pair_.contexts[0]->address_for({1, pair_.contexts[1]->address()}), "") << "no second round asked for";
  }
}

// Two communicators of one process joining the same pair of ranks over the same device (a split and its parent)
// at once: each context's traffic stays its own, whether the transport shares connections or not, and aborting
// one leaves the other working.
TEST_P(Conformance, TwoContextsOfOnePairKeepTheirTrafficApart) {
  static uint64_t other_id = 500000;
  Pair second = connect_pair(*device_, ++other_id);
  int first_got = 0, second_got = 0;
  const int first_value = 111, second_value = 222;
  // Same tags and signatures on both; the second's receive posted first, the first's send sent first.
  auto second_recv = second.endpoints[1]->irecv(&second_got, sizeof(int), {9, 9});
  auto first_send = pair_.endpoints[0]->isend(&first_value, sizeof(int), {9, 9});
  auto second_send = second.endpoints[0]->isend(&second_value, sizeof(int), {9, 9});
  auto first_recv = pair_.endpoints[1]->irecv(&first_got, sizeof(int), {9, 9});
  for (Request* request : {second_recv.get(), first_send.get(), second_send.get(), first_recv.get()}) wait(*request);
  EXPECT_EQ(first_got, first_value);
  EXPECT_EQ(second_got, second_value);

  second.contexts[0]->abort();
  int stray = 0;
  auto failing = second.endpoints[1]->irecv(&stray, sizeof(int), {10, 10});
  EXPECT_THROW(wait(*failing), IoError);
  auto recv = pair_.endpoints[1]->irecv(&first_got, sizeof(int), {10, 10});
  const int again = 333;
  auto send = pair_.endpoints[0]->isend(&again, sizeof(int), {10, 10});
  wait(*send);
  wait(*recv);
  EXPECT_EQ(first_got, again) << "the other context's abort touched this one";
}

INSTANTIATE_TEST_SUITE_P(Transports, Conformance, ::testing::ValuesIn(test::test_transports()));

// Loopback endpoints attach to their mailboxes without waiting for the peer: a sender may send and be destroyed
// before its receiver exists (a rank whose last call only sends). The message must not go with the mailbox.
TEST(Loopback, MessageWaitsForAReceiverThatAttachesAfterTheSenderLeft) {
  std::shared_ptr<Device> device = find_device("loopback");
  ASSERT_NE(device, nullptr);
  const uint64_t comm_id = 77777;
  {
    auto sender = device->create_context(args_of(0, comm_id));
    auto endpoints = sender->connect({{1, "loopback"}}, deadline_after(10));
    int value = 1234;
    auto request = endpoints.at(0)->isend(&value, sizeof(value), Tag{1, 2});
    wait(*request);
  }
  auto receiver = device->create_context(args_of(1, comm_id));
  auto endpoints = receiver->connect({{0, "loopback"}}, deadline_after(10));
  int got = 0;
  auto request = endpoints.at(0)->irecv(&got, sizeof(got), Tag{1, 2});
  wait(*request);
  EXPECT_EQ(got, 1234);
}

}  // namespace
}  // namespace tbcoll::transport
