// The emulated link (transports/delay/delay.h) and a peer that goes away: what the peer sent before it closed is
// delivered, after its emulated time, before the close is reported, and the close is not held any longer than
// that. Over a scripted inner endpoint with the loopback transport's rules, so each case happens the same way
// every run (with real ranks it takes a race: tests/collectives/emulation_test.cc has those). And a dilated link
// (dilate=k) holding each message k times the link's own time.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "tbcoll/error.hpp"
#include "transports/delay/delay.h"

namespace tbcoll {
namespace {

using Clock = std::chrono::steady_clock;
using transport::Request;
using transport::Tag;

constexpr auto kLatency = std::chrono::milliseconds(50);
constexpr auto kPatience = std::chrono::seconds(10);  // far past every emulated time here: "never" in these tests

// The peer's side of one direction, as the loopback transport has it: receives match messages in posting order,
// and a receive tested once the peer has gone fails unless its own message is next and there.
struct ScriptedPeer {
  int sent = 0;                                // messages the peer has sent
  bool gone = false;                           // the peer destroyed its communicator
  int matched = 0;                             // messages taken by receives
  int looks = 0;                               // inner receive tests so far
  std::function<void(ScriptedPeer&)> on_look;  // what the peer does just before a look (runs once per look)
};

class ScriptedReceive final : public Request {
 public:
  ScriptedReceive(ScriptedPeer& peer, int index) : peer_(peer), index_(index) {}
  bool test() override {
    if (done_) return true;
    ++peer_.looks;
    if (peer_.on_look) peer_.on_look(peer_);
    const bool mine_is_next = peer_.matched == index_ && peer_.sent > index_;
    if (peer_.gone && !mine_is_next) throw IoError("[scripted] rank 1: connection to peer 0 closed (peer gone)");
    if (!mine_is_next) return false;
    ++peer_.matched;
    done_ = true;
    return true;
  }
  void block(std::chrono::microseconds) override {}

 private:
  ScriptedPeer& peer_;
  int index_;
  bool done_ = false;
};

class DoneSend final : public Request {
 public:
  bool test() override { return true; }
  void block(std::chrono::microseconds) override {}
};

class ScriptedEndpoint final : public transport::Endpoint {
 public:
  explicit ScriptedEndpoint(ScriptedPeer& peer) : peer_(peer) {}
  std::unique_ptr<Request> isend(const void*, size_t, Tag) override {
    if (peer_.gone) throw IoError("[scripted] rank 1: connection to peer 0 closed (peer gone)");
    return std::make_unique<DoneSend>();
  }
  std::unique_ptr<Request> irecv(void*, size_t, Tag) override {
    return std::make_unique<ScriptedReceive>(peer_, receives_++);
  }
  int peer() const override { return 0; }

 private:
  ScriptedPeer& peer_;
  int receives_ = 0;
};

std::unique_ptr<transport::Endpoint> emulated(ScriptedPeer& peer, transport::LinkEmulation link = {}) {
  if (!link.on()) {
    link.name = "custom";
    link.latency_us = std::chrono::duration<double, std::micro>(kLatency).count();
  }
  return transport::with_emulation(std::make_unique<ScriptedEndpoint>(peer), link,
                                   std::make_shared<std::atomic<int>>(0));
}

// Waits for request as the algorithms do (test, then block a little); returns when it completed, "" if it did, or
// the error it threw.
std::string wait_for(Request& request, Clock::time_point* when) {
  const auto give_up = Clock::now() + kPatience;
  try {
    while (!request.test()) {
      if (Clock::now() > give_up) return "still waiting after 10 s";
      request.block(std::chrono::microseconds(1000));
    }
    *when = Clock::now();
    return "";
  } catch (const IoError& error) {
    *when = Clock::now();
    return error.what();
  }
}

// The peer sends three messages and destroys its communicator between two looks of the receiver, which had posted
// its three receives: they all complete, a latency after they arrived. (The emulation must not look at the later
// receives before the first one has its message: the scripted transport, like loopback, answers such a
// look with the close.)
TEST(EmulatedLinkClose, MessagesSentBeforeTheCloseAreDelivered) {
  ScriptedPeer peer;
  peer.on_look = [](ScriptedPeer& p) {
    if (p.looks == 2) p.sent = 3, p.gone = true;
  };
  auto endpoint = emulated(peer);
  std::unique_ptr<Request> receives[3];
  for (auto& receive : receives) receive = endpoint->irecv(nullptr, 8, Tag{});
  const auto start = Clock::now();
  for (auto& receive : receives) {
    Clock::time_point done;
    EXPECT_EQ(wait_for(*receive, &done), "");
    EXPECT_GE(done - start, kLatency);
  }
  EXPECT_EQ(peer.matched, 3);
}

// The peer sent one message and went, the receiver waits for two: the first completes after its emulated time,
// and the second fails with the close, then and not before (a real link delivers what was sent before the close
// first); nor much later: the close itself pays no emulated time, and waiting for it never blocks past it.
TEST(EmulatedLinkClose, TheCloseIsReportedOnceTheHeldMessagesAreDelivered) {
  ScriptedPeer peer;
  peer.sent = 1;
  peer.gone = true;
  auto endpoint = emulated(peer);
  auto first = endpoint->irecv(nullptr, 8, Tag{});
  auto second = endpoint->irecv(nullptr, 8, Tag{});
  const auto start = Clock::now();
  // The first look takes the first message and sees the close (false, or the close if a whole latency passed
  // since: checked below by time, not here).
  try {
    EXPECT_FALSE(second->test());
  } catch (const IoError&) {
  }
  const auto block_start = Clock::now();
  second->block(std::chrono::duration_cast<std::chrono::microseconds>(kPatience));
  EXPECT_LT(Clock::now() - block_start, kPatience / 2) << "block() waits for the close's due time, no longer";
  Clock::time_point failed_at;
  EXPECT_NE(wait_for(*second, &failed_at).find("connection to peer 0 closed"), std::string::npos);
  EXPECT_GE(failed_at - start, kLatency) << "the close came before the message sent ahead of it";
  EXPECT_TRUE(first->test()) << "the message sent before the close is delivered before the close is reported";
  EXPECT_EQ(peer.matched, 1);
}

// A send to a peer that has gone fails too, but only once what the peer sent before going has been delivered.
TEST(EmulatedLinkClose, ASendToAGonePeerFailsAfterTheHeldMessages) {
  ScriptedPeer peer;
  auto endpoint = emulated(peer);
  auto receive = endpoint->irecv(nullptr, 8, Tag{});
  peer.sent = 1;
  peer.gone = true;
  const auto start = Clock::now();
  (void)receive->test();  // arrived: now on the emulated link
  std::unique_ptr<Request> send;
  ASSERT_NO_THROW(send = endpoint->isend(nullptr, 8, Tag{})) << "the close is not known yet on this side";
  Clock::time_point failed_at;
  EXPECT_NE(wait_for(*send, &failed_at).find("connection to peer 0 closed"), std::string::npos);
  EXPECT_GE(failed_at - start, kLatency);
  EXPECT_TRUE(receive->test());
}

// Dilation multiplies the latency and the serialisation time alike: 5 us x 10000 is 50 ms one way, and 100 kB
// over 1 Gbit/s / 100 take 80 ms on the link (undilated: 5 us and 0.8 ms). Floors only: no load lowers them.
TEST(EmulatedLinkDilation, HoldsAMessageKTimesTheLinksTime) {
  struct Case {
    double latency_us, gbps, dilation;
    size_t bytes;
    std::chrono::milliseconds at_least;
  };
  for (const Case& c : {Case{5, 0, 1e4, 8, std::chrono::milliseconds(50)},
                        Case{0, 1, 100, 100000, std::chrono::milliseconds(80)}}) {
    ScriptedPeer peer;
    peer.sent = 1;
    transport::LinkEmulation link;
    link.name = "custom";
    link.latency_us = c.latency_us;
    link.gbit_per_s = c.gbps;
    link.dilation = c.dilation;
    auto endpoint = emulated(peer, link);
    const auto start = Clock::now();
    auto receive = endpoint->irecv(nullptr, c.bytes, Tag{});
    Clock::time_point done;
    EXPECT_EQ(wait_for(*receive, &done), "");
    EXPECT_GE(done - start, c.at_least) << c.latency_us << " us, " << c.gbps << " Gbit/s, dilate " << c.dilation;
  }
}

}  // namespace
}  // namespace tbcoll
