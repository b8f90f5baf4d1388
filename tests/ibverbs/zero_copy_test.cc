// Zero-copy sends from registered memory (transport::Context::register_memory, wire.h's zero-copy slots) on the
// fake fabric: Apple's strict rules (one SGE, 16 KiB-aligned registrations, sends spanning their receive's frames)
// and a permissive device; the bytes that arrive, which slots went zero-copy, a lost slot, a registration dropped
// while a send uses it, a device's registration budget spent, and the communicator's and C API's registration.
#include <chrono>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "collectives/harness.h"
#include "common/time.h"
#include "fake_verbs/endpoint_pair.h"
#include "fake_verbs/fake_verbs.h"
#include "transports/ibverbs/device.h"
#include "transports/ibverbs/endpoint.h"

namespace tbcoll::ibverbs {
namespace {

using ZeroCopyPair = fake::EndpointPair;

// Zero-copy on at both ends (TBCOLL_IB_ZERO_COPY=1: by default only RC links have it, and the strict fabric's are
// UC, as Apple's).
std::unique_ptr<ZeroCopyPair> zero_copy_pair(const fake::Options& options,
                                             std::map<std::string, std::string> knobs = {}) {
  fake::reset(options);
  knobs.emplace("TBCOLL_IB_ZERO_COPY", "1");
  return fake::connect_endpoint_pair(knobs);
}

// Zero-copy slots rank 0 sent, over all its rails.
uint64_t zero_copy_slots(ZeroCopyPair& pair) {
  uint64_t slots = 0;
  for (int rail = 0; rail < pair.ib(0).rails(); ++rail) slots += pair.ib(0).rail(rail).zero_copy_slots_sent();
  return slots;
}

std::vector<uint8_t> random_bytes(size_t bytes, unsigned seed) {
  std::vector<uint8_t> out(bytes);
  std::mt19937 random(seed);
  for (auto& byte : out) byte = static_cast<uint8_t>(random());
  return out;
}

// Sends each of `messages` (pointers into the sender's memory) to the receiver, all posted before any is driven,
// and returns what arrived; the first error, if any, in *error.
using Messages = std::vector<std::pair<const uint8_t*, size_t>>;
std::vector<std::vector<uint8_t>> send_all(ZeroCopyPair& pair, const Messages& messages, std::string* error = nullptr) {
  std::vector<std::vector<uint8_t>> arrived;
  std::vector<std::unique_ptr<transport::Request>> requests;
  for (size_t i = 0; i < messages.size(); ++i) {
    arrived.emplace_back(messages[i].second);
    requests.push_back(pair.endpoints[1]->irecv(arrived.back().data(), messages[i].second, {i, 3}));
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    requests.push_back(pair.endpoints[0]->isend(messages[i].first, messages[i].second, {i, 3}));
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  try {
    for (auto& request : requests) {
      while (!request->test()) {
        for (auto& other : requests) (void)other->test();  // both ends progress: credits flow
        if (std::chrono::steady_clock::now() > give_up) throw TimeoutError("exchange: no progress in 20 s");
      }
    }
  } catch (const Error& e) {
    if (error == nullptr) throw;
    *error = e.what();
  }
  return arrived;
}

fake::Options apple_fabric() { return fake::Options{}; }
fake::Options roce_fabric() {
  fake::Options options;
  options.apple_strict = false;
  return options;
}

class IbverbsZeroCopy : public ::testing::TestWithParam<bool> {};  // strict (Apple's rules) or permissive

// Messages of a slot's size and odd sizes around several slots, at odd offsets inside one registration, queued
// together (notes and slots of several messages in flight at once).
TEST_P(IbverbsZeroCopy, RegisteredSendsArriveWhole) {
  auto pair = zero_copy_pair(GetParam() ? apple_fabric() : roce_fabric());
  const std::vector<uint8_t> memory = random_bytes((size_t{9} << 20) + 4096, 1);
  auto registration = pair->contexts[0]->register_memory(memory.data(), memory.size());
  ASSERT_TRUE(registration) << "the fake takes a page-rounded registration";
  const uint8_t* base = memory.data();
  const Messages messages = {
      {base + 13, 512 * 1024},               // one slot's size: frames and a padded slot, or one zero-copy slot
      {base + 4099, (size_t{3} << 20) + 13},  // several zero-copy slots, then a padded slot or frames
      {base + (size_t{4} << 20), 1024 * 1024 + 517 * 1024 + 1},
      {base, memory.size()},  // the whole registration: the last slot's read stays inside it
  };
  const auto arrived = send_all(*pair, messages);
  for (size_t i = 0; i < messages.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(arrived[i].data(), messages[i].first, messages[i].second)) << "message " << i;
  }
  EXPECT_GE(zero_copy_slots(*pair), 4u) << "zero-copy slots for each message";
  EXPECT_EQ(fake::counters().length_errors, 0u) << "every zero-copy send spans its receive's frames";
}

// Striped over two cables: each rail sends its part zero-copy under its own device's registration.
TEST_P(IbverbsZeroCopy, EachRailSendsItsPartUnderItsDevicesRegistration) {
  fake::Options options = GetParam() ? apple_fabric() : roce_fabric();
  options.devices = 2;
  auto pair = zero_copy_pair(options, {{"TBCOLL_IB_RAILS", "2"}});
  ASSERT_EQ(pair->ib(0).rails(), 2);
  const std::vector<uint8_t> memory = random_bytes((size_t{5} << 20) + 77, 2);
  auto registration = pair->contexts[0]->register_memory(memory.data(), memory.size());
  ASSERT_TRUE(registration);
  const auto arrived = send_all(*pair, {{memory.data(), memory.size()}});
  ASSERT_EQ(arrived[0], memory);
  EXPECT_GT(pair->ib(0).rail(0).zero_copy_slots_sent(), 0u);
  EXPECT_GT(pair->ib(0).rail(1).zero_copy_slots_sent(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Devices, IbverbsZeroCopy, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Apple" : "Permissive"; });

TEST(IbverbsZeroCopyUse, MemoryOutsideARegistrationIsCopied) {
  auto pair = zero_copy_pair(apple_fabric());
  const std::vector<uint8_t> registered = random_bytes(size_t{2} << 20, 3), other = random_bytes(size_t{2} << 20, 4);
  auto registration = pair->contexts[0]->register_memory(registered.data(), registered.size() / 2);
  ASSERT_TRUE(registration);
  // The second message crosses the registration's end, the third lies beyond it: copied, as `other` is.
  const size_t half = registered.size() / 2;
  const auto arrived = send_all(*pair, {{other.data(), other.size()},
                                        {registered.data() + 1, registered.size() - 1},
                                        {registered.data() + half + 1, half - 1}});
  EXPECT_EQ(arrived[0], other);
  EXPECT_EQ(0, std::memcmp(arrived[1].data(), registered.data() + 1, registered.size() - 1));
  EXPECT_EQ(0, std::memcmp(arrived[2].data(), registered.data() + half + 1, half - 1));
  EXPECT_EQ(zero_copy_slots(*pair), 0u);
}

// UC drops a zero-copy slot without a word and the next one lands in its place: the sum its note carries gives the
// gap away, and the receive fails instead of taking the next slot's bytes for the lost one's.
TEST(IbverbsZeroCopyUse, ALostSlotFailsTheReceive) {
  auto pair = zero_copy_pair(apple_fabric());
  const std::vector<uint8_t> memory = random_bytes(size_t{4} << 20, 5);
  auto registration = pair->contexts[0]->register_memory(memory.data(), memory.size());
  ASSERT_TRUE(registration);
  send_all(*pair, {{memory.data(), size_t{1} << 20}});  // under way: the next send posted is a zero-copy slot
  const uint64_t before = zero_copy_slots(*pair);
  fake::drop_next_sends(1);
  std::string error;
  send_all(*pair, {{memory.data(), memory.size()}}, &error);
  EXPECT_GT(zero_copy_slots(*pair), before);
  EXPECT_EQ(fake::counters().dropped_injected, 1u);
  EXPECT_NE(error.find("does not hold what its note says"), std::string::npos) << error;
}

// The caller may drop its registration while a send still goes from it: the send keeps it (the adapter reads the
// memory) until its last slot was sent; then it is deregistered.
TEST(IbverbsZeroCopyUse, ARegistrationDroppedDuringASendLastsUntilItsSlotsWereSent) {
  auto pair = zero_copy_pair(apple_fabric());
  const std::vector<uint8_t> memory = random_bytes(size_t{6} << 20, 6);
  auto registration = pair->contexts[0]->register_memory(memory.data(), memory.size());
  ASSERT_TRUE(registration);
  std::vector<uint8_t> arrived(memory.size());
  auto recv = pair->endpoints[1]->irecv(arrived.data(), arrived.size(), {1, 1});
  auto send = pair->endpoints[0]->isend(memory.data(), memory.size(), {1, 1});
  fake::clear_calls();
  registration.reset();
  EXPECT_EQ(fake::calls()["dereg_mr"], 0u) << "the send in flight holds the registration";
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (bool sent = false, received = false; !(sent && received);) {
    sent = sent || send->test();
    received = received || recv->test();
    ASSERT_LT(std::chrono::steady_clock::now(), give_up);
  }
  EXPECT_EQ(arrived, memory);
  EXPECT_GT(zero_copy_slots(*pair), 0u);
  EXPECT_EQ(fake::calls()["dereg_mr"], 1u) << "deregistered once its send was done";
}

// A send dropped with zero-copy slots in flight (their completions never polled) holds its registration, and
// through it the opened device, but not the port: everything closes once the communicator's objects are gone.
TEST(IbverbsZeroCopyUse, ASendDroppedInFlightLeavesNothingOpen) {
  auto pair = zero_copy_pair(apple_fabric());
  const std::vector<uint8_t> memory = random_bytes(size_t{4} << 20, 8);
  auto registration = pair->contexts[0]->register_memory(memory.data(), memory.size());
  ASSERT_TRUE(registration);
  fake::clear_calls();
  auto send = pair->endpoints[0]->isend(memory.data(), memory.size(), {1, 1});  // its first slots leave here
  EXPECT_GT(zero_copy_slots(*pair), 0u);
  send.reset();  // waits for the slots' sends: the memory is the caller's again
  registration.reset();
  EXPECT_EQ(fake::calls()["dereg_mr"], 1u) << "the dropped send let go of the registration";
  pair.reset();
  EXPECT_EQ(fake::calls()["dereg_mr"], 3u) << "both links' buffers and the caller's registration";
  EXPECT_EQ(fake::calls()["dealloc_pd"], 2u);
  EXPECT_EQ(fake::calls()["close_device"], 2u);
}

// Slots and notes travel on two queue pairs: a note may come first, and its slot is placed when it arrives.
TEST(IbverbsZeroCopyUse, ANoteThatComesBeforeItsSlotWaitsForIt) {
  fake::Options options = apple_fabric();
  options.overtake_slots = true;
  auto pair = zero_copy_pair(options);
  const std::vector<uint8_t> memory = random_bytes((size_t{6} << 20) + 4096, 9);
  auto registration = pair->contexts[0]->register_memory(memory.data(), memory.size());
  ASSERT_TRUE(registration);
  // Each message ends in small frames (they release the last overtaken slot).
  const Messages messages = {{memory.data() + 7, (size_t{3} << 20) + 13},
                             {memory.data() + (size_t{4} << 20), (size_t{2} << 20) + 100}};
  const auto arrived = send_all(*pair, messages);
  for (size_t i = 0; i < messages.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(arrived[i].data(), messages[i].first, messages[i].second)) << "message " << i;
  }
  EXPECT_GE(zero_copy_slots(*pair), 8u);
}

// A link sends zero-copy only when both ends offered it (TBCOLL_IB_ZERO_COPY): with one end off, its slots keep
// their headers (no notes), and registered memory is copied like any other.
TEST(IbverbsZeroCopyUse, BothEndsMustOfferIt) {
  for (const auto& [rank0, rank1] : {std::pair<const char*, const char*>{"0", "1"}, {"1", "0"}, {"1", "1"}}) {
    SCOPED_TRACE(std::string("rank 0 ") + rank0 + ", rank 1 " + rank1);
    fake::reset(apple_fabric());
    auto pair = fake::connect_endpoint_pair({{"TBCOLL_IB_ZERO_COPY", rank0}}, {{"TBCOLL_IB_ZERO_COPY", rank1}});
    const bool both = std::string(rank0) == "1" && std::string(rank1) == "1";
    EXPECT_EQ(pair->ib(0).rail(0).noted(), both);
    EXPECT_EQ(pair->ib(1).rail(0).noted(), both);
    const std::vector<uint8_t> memory = random_bytes((size_t{3} << 20) + 100, 12);
    auto registration = pair->contexts[0]->register_memory(memory.data(), memory.size());
    ASSERT_TRUE(registration);
    const auto arrived = send_all(*pair, {{memory.data() + 5, memory.size() - 5}});
    ASSERT_EQ(0, std::memcmp(arrived[0].data(), memory.data() + 5, memory.size() - 5));
    EXPECT_EQ(zero_copy_slots(*pair) > 0, both);
  }
}

// By default zero-copy is on where a link is RC (nothing lost, no sums) and off on UC, where each zero-copy slot
// carries its sum (a pass over it on each side, more than the copy it saves).
TEST(IbverbsZeroCopyUse, ByDefaultOnRcLinksOnly) {
  for (bool strict : {true, false}) {
    SCOPED_TRACE(strict ? "UC (Apple's rules)" : "RC (permissive)");
    fake::reset(strict ? apple_fabric() : roce_fabric());
    auto pair = fake::connect_endpoint_pair();
    EXPECT_EQ(pair->ib(0).rail(0).mode(), strict ? Mode::kUc : Mode::kRc);
    EXPECT_EQ(pair->ib(0).rail(0).noted(), !strict);
  }
}

// On Apple's librdma zero-copy is off until asked for (tbcoll-rdma-check verifies it on the machine first): the
// fake stands in for that provider here, with slots forced on (before macOS 26.3 there are none by default).
TEST(IbverbsZeroCopyUse, OffOnApplesStackUntilAskedFor) {
  VerbsApi librdma = *fake::verbs();
  librdma.provider = "librdma";
  for (const char* knob : {"auto", "1"}) {
    SCOPED_TRACE(std::string("TBCOLL_IB_ZERO_COPY=") + knob);
    fake::reset(apple_fabric());
    auto pair = fake::connect_endpoint_pair({{"TBCOLL_IB_ZERO_COPY", knob}, {"TBCOLL_IB_SLOT_BYTES", "524288"}}, {},
                                            &librdma);
    EXPECT_EQ(pair->ib(0).rail(0).noted(), std::string(knob) == "1");
  }
}

// Zero-copy slots start on 16 KiB boundaries and are sent whole, however the message lies in the registration:
// the bytes before the first boundary go in frames.
TEST(IbverbsZeroCopyUse, SlotsGoFromAlignedAddressesOnly) {
  auto pair = zero_copy_pair(apple_fabric());
  const std::vector<uint8_t> memory = random_bytes(size_t{4} << 20, 13);
  auto registration = pair->contexts[0]->register_memory(memory.data(), memory.size());
  ASSERT_TRUE(registration);
  const uintptr_t base = reinterpret_cast<uintptr_t>(memory.data());
  const size_t to_boundary = (wire::kZeroCopyAlign - base % wire::kZeroCopyAlign) % wire::kZeroCopyAlign;
  for (size_t skew : {size_t{1}, size_t{4096}, wire::kZeroCopyAlign - 1, wire::kZeroCopyAlign}) {
    SCOPED_TRACE(skew);
    const uint8_t* start = memory.data() + to_boundary + skew;
    const size_t bytes = (size_t{2} << 20) + 333;
    const uint64_t before = zero_copy_slots(*pair);
    const auto arrived = send_all(*pair, {{start, bytes}});
    ASSERT_EQ(0, std::memcmp(arrived[0].data(), start, bytes));
    EXPECT_GE(zero_copy_slots(*pair) - before, 3u) << "whole 512 KiB slots from the first boundary on";
  }
  EXPECT_EQ(fake::counters().length_errors, 0u);
}

// Callers get the device's max_mr (ibv_query_device; Apple's about 100) less kLinkRegistrations: every link takes
// one. The fake says 40 here: callers get 4, where a constant budget of 64 would run the device dry.
TEST(IbverbsZeroCopyUse, CallersRegistrationsLeaveRoomForLinks) {
  fake::Options options = apple_fabric();
  options.max_mrs = 40;
  auto pair = zero_copy_pair(options);
  const int callers = options.max_mrs - kLinkRegistrations;
  constexpr size_t kPage = 16384;
  std::vector<uint8_t> memory(static_cast<size_t>(callers + 2) * 2 * kPage);
  const uintptr_t aligned = (reinterpret_cast<uintptr_t>(memory.data()) + kPage - 1) / kPage * kPage;
  std::vector<std::unique_ptr<transport::Registration>> held;
  for (int i = 0; i < callers; ++i) {
    held.push_back(pair->contexts[0]->register_memory(reinterpret_cast<void*>(aligned + 2 * kPage * i), kPage));
    ASSERT_TRUE(held.back()) << i;
  }
  EXPECT_FALSE(pair->contexts[0]->register_memory(reinterpret_cast<void*>(aligned + 2 * kPage * held.size()), kPage));
  held.pop_back();
  EXPECT_TRUE(pair->contexts[0]->register_memory(reinterpret_cast<void*>(aligned + 2 * kPage * held.size()), kPage));
}

// A registration longer than the device's max_mr_size (Apple's stack was seen corrupting silently past 2^32 bytes
// in one) is never asked for: a longer range is registered in pieces (each counted in the budget), and a message's
// zero-copy slots stay inside the piece its first one is in (the rest is copied).
TEST(IbverbsZeroCopyUse, LongRangesAreRegisteredInPiecesNoLongerThanTheDeviceSays) {
  fake::Options options = apple_fabric();
  options.max_mr_bytes = 3 << 20;  // (a link's own buffers take 2.25 MiB)
  auto pair = zero_copy_pair(options);
  const std::vector<uint8_t> memory = random_bytes(size_t{8} << 20, 11);
  const auto registrations = fake::calls()["reg_mr"];
  auto registration = pair->contexts[0]->register_memory(memory.data(), memory.size());
  ASSERT_TRUE(registration);
  EXPECT_EQ(fake::calls()["reg_mr"] - registrations, 3u) << "8 MiB (and its rounding) in pieces of 3 MiB";
  EXPECT_EQ(fake::counters().oversized_registrations, 0u);
  const Messages messages = {{memory.data(), memory.size()}, {memory.data() + (size_t{5} << 20) + 1, size_t{2} << 20}};
  const auto arrived = send_all(*pair, messages);
  for (size_t i = 0; i < messages.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(arrived[i].data(), messages[i].first, messages[i].second)) << "message " << i;
  }
  EXPECT_GE(zero_copy_slots(*pair), 6u) << "whole slots in the first piece (up to 6 of 3 MiB), and in the second";
  EXPECT_EQ(fake::counters().length_errors, 0u);
}

// A device that says no limit at all (rxe reports max_mr_size 2^64 - 1) takes a range in one piece.
TEST(IbverbsZeroCopyUse, ADeviceWithoutALimitTakesARangeInOnePiece) {
  fake::Options options = roce_fabric();
  options.max_mr_bytes = ~uint64_t{0};
  auto pair = zero_copy_pair(options);
  const std::vector<uint8_t> memory = random_bytes(size_t{3} << 20, 14);
  const auto registrations = fake::calls()["reg_mr"];
  auto registration = pair->contexts[0]->register_memory(memory.data() + 100, memory.size() - 200);
  ASSERT_TRUE(registration);
  EXPECT_EQ(fake::calls()["reg_mr"] - registrations, 1u);
  const auto arrived = send_all(*pair, {{memory.data() + 100, memory.size() - 200}});
  ASSERT_EQ(0, std::memcmp(arrived[0].data(), memory.data() + 100, memory.size() - 200));
  EXPECT_GT(zero_copy_slots(*pair), 0u);
}

TEST(IbverbsZeroCopyUse, RegistrationLimitsComeFromTheDevice) {
  EXPECT_EQ(registration_limits(true, true, 100, 0).count, 100 - kLinkRegistrations);
  EXPECT_EQ(registration_limits(true, true, 0, 0).count, kCallerRegistrationsOnApple) << "Apple, max_mr not said";
  EXPECT_EQ(registration_limits(false, false, 0, 0).count, 0) << "no limit of ours elsewhere";
  EXPECT_EQ(registration_limits(false, false, 10, 0).count, 1) << "at least one";
  EXPECT_EQ(registration_limits(true, true, 100, uint64_t{1} << 40).bytes, kMaxRegistrationOnLibrdma);
  EXPECT_EQ(registration_limits(true, true, 100, 0).bytes, kMaxRegistrationOnLibrdma);
  EXPECT_EQ(registration_limits(true, true, 100, 1 << 20).bytes, uint64_t{1} << 20);
  EXPECT_EQ(registration_limits(false, false, 100, 0).bytes, 0u);
}

// Apple allows about 100 registrations per device: with none left, register_memory says so (null) and sends
// copy as before.
TEST(IbverbsZeroCopyUse, ASpentRegistrationBudgetMeansCopies) {
  fake::Options options = apple_fabric();
  options.max_mrs = 1;  // the link's own buffers take it
  auto pair = zero_copy_pair(options);
  const std::vector<uint8_t> memory = random_bytes(size_t{2} << 20, 7);
  EXPECT_FALSE(pair->contexts[0]->register_memory(memory.data(), memory.size()));
  const auto arrived = send_all(*pair, {{memory.data(), memory.size()}});
  EXPECT_EQ(arrived[0], memory);
  EXPECT_EQ(zero_copy_slots(*pair), 0u);
}

// Apple's provider takes only 16 KiB-aligned registrations: the registration is rounded out to whole pages.
TEST(IbverbsZeroCopyUse, RegistrationsAreRoundedToWholePages) {
  auto pair = zero_copy_pair(apple_fabric());
  std::vector<uint8_t> memory(size_t{1} << 20);
  fake::clear_calls();
  auto registration = pair->contexts[0]->register_memory(memory.data() + 100, memory.size() - 200);
  EXPECT_TRUE(registration);
  EXPECT_EQ(fake::calls()["reg_mr"], 1u) << "the rounded range at the first try (an unaligned one fails on Apple)";
}

TEST(IbverbsZeroCopyUse, ACommunicatorRegistersWithItsTransports) {
  fake::ScopedFabric fabric(apple_fabric());
  test::RankOptions options{"fakeverbs", "", 20};
  options.knobs["TBCOLL_IB_ZERO_COPY"] = "1";
  test::run_ranks(2, options, [&](Communicator& comm) {
    const size_t count = (size_t{3} << 20) / sizeof(float) + 7;
    std::vector<float> data(count), sum(count);
    for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>((i % 1000) + comm.rank());
    MemoryRegistration registered = comm.register_memory(data.data(), data.size() * sizeof(float));
    MemoryRegistration result = comm.register_memory(sum.data(), sum.size() * sizeof(float));
    EXPECT_EQ(registered.transports(), 1);
    comm.barrier();
    if (comm.rank() == 0) fake::watch_sends_from(data.data(), data.size() * sizeof(float));
    comm.barrier();
    if (comm.rank() == 0) comm.send(data.data(), count, DataType::kFloat32, 1);
    if (comm.rank() == 1) comm.recv(sum.data(), count, DataType::kFloat32, 0);
    comm.barrier();
    EXPECT_GE(fake::counters().watched_bytes_sent, count * sizeof(float) - (size_t{1} << 19) - wire::kZeroCopyAlign)
        << "the send went from the registered memory itself (all but its head, up to the first 16 KiB boundary, "
           "and its tail)";
    comm.all_reduce(data.data(), sum.data(), count, DataType::kFloat32, ReduceOp::kSum);
    for (size_t i = 0; i < count; i += 997) ASSERT_EQ(sum[i], static_cast<float>(2 * (i % 1000) + 1)) << i;
    std::vector<float> got(count);
    if (comm.rank() == 0) comm.send(data.data(), count, DataType::kFloat32, 1);
    if (comm.rank() == 1) {
      comm.recv(got.data(), count, DataType::kFloat32, 0);
      for (size_t i = 0; i < count; i += 991) ASSERT_EQ(got[i], static_cast<float>(i % 1000)) << i;
    }
    registered.reset();
    EXPECT_EQ(registered.transports(), 0);
    EXPECT_THROW(comm.register_memory(nullptr, 10), InvalidArgument);
  });
}

}  // namespace
}  // namespace tbcoll::ibverbs
