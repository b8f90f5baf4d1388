// Exec's wait against a scripted peer: what a wait throws when the communicator's watch reports that the peer gave
// up (its notice, through the store) while the peer's last message is already here.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "algorithms/exec.h"
#include "tbcoll/error.hpp"

namespace tbcoll {
namespace {

// One peer whose receives do not complete until arrived is set; then they fail as a message of another call
// would (MismatchError), or complete when mismatch is false.
struct ScriptedPeer final : transport::Endpoint {
  struct Receive final : transport::Request {
    explicit Receive(const ScriptedPeer& peer) : peer_(peer) {}
    bool test() override {
      if (!peer_.arrived) return false;
      if (peer_.mismatch) throw MismatchError("scripted: another call's message", 1, 0x10, 0x20, 16, 20);
      return true;
    }
    void block(std::chrono::microseconds) override {}
    const ScriptedPeer& peer_;
  };
  std::unique_ptr<transport::Request> isend(const void*, size_t, transport::Tag) override { return nullptr; }
  std::unique_ptr<transport::Request> irecv(void*, size_t, transport::Tag) override {
    return std::make_unique<Receive>(*this);
  }
  int peer() const override { return 1; }
  bool arrived = false;
  bool mismatch = true;
};

// What wait() throws on rank 0 of 2 when the first look of the watch finds the peer's notice and the peer's message
// arrived in the meantime (the watch sets arrived, as the peer sends before it tells).
std::string wait_with_notice(ScriptedPeer& peer) {
  std::vector<transport::Endpoint*> peers{nullptr, &peer};
  std::vector<size_t> max_message{SIZE_MAX, SIZE_MAX};
  algo::Scratch scratch;
  algo::RequestTable table;
  transport::WaitPolicy wait(transport::WaitPolicy::Mode::kAuto, std::chrono::microseconds(0),
                             transport::SpinYield::kNever);
  algo::Exec exec(0, 2, peers, max_message, transport::Tag{1, 0x10}, Clock::now() + std::chrono::seconds(10), wait,
                  1 << 20, scratch, table, algo::CallInfo{"all_to_all"});
  auto notice = [&] {
    peer.arrived = true;
    throw RemoteError("peer 1 failed and takes part in no further call");
  };
  exec.set_watch(transport::Watch(notice));
  float buffer[4];
  const size_t id = exec.irecv(1, buffer, sizeof(buffer));
  try {
    exec.wait(id);
  } catch (const MismatchError& error) {
    return std::string("mismatch: ") + error.what();
  } catch (const RemoteError& error) {
    return std::string("notice: ") + error.what();
  }
  return "returned";
}

TEST(Exec, AMessageThatArrivedBeforeThePeersNoticeIsReadFirst) {
  ScriptedPeer peer;
  EXPECT_EQ(wait_with_notice(peer), "mismatch: scripted: another call's message");
}

TEST(Exec, ThePeersNoticeEndsTheWaitWhenNothingElseSaysMore) {
  ScriptedPeer peer;
  peer.mismatch = false;  // its message matched: the notice still ends the call, which the peer left
  EXPECT_EQ(wait_with_notice(peer), "notice: peer 1 failed and takes part in no further call");
}

}  // namespace
}  // namespace tbcoll
