// Shared-memory segments are mapped only when they are this user's, closed to others, and created by the peer the
// rendezvous record names; the sweep of dead ranks' segments leaves other users' files alone.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <string>

#include "collectives/harness.h"
#include "common/time.h"
#include "platform/platform.h"
#include "tbcoll/transport.hpp"
#include "transports/shm/segment.h"
#include "transports/shm/stale_segments.h"

namespace tbcoll {
namespace {

constexpr uid_t kOtherUid = 54321;

// A pid no process has now: a child's, once it is reaped.
int dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  return static_cast<int>(child);
}

bool exists(const std::string& name) {
  const int fd = platform::shm_open_existing(name);
  if (fd < 0) return false;
  close(fd);
  return true;
}

// A segment under a name made like the ranks' ones, sized for a 2-rank world, owned by uid, with mode.
std::string make_segment(int pid, uint64_t key, uid_t uid, mode_t mode) {
  const std::string name = platform::shm_name(pid, key);
  const int fd = platform::shm_create(name);
  EXPECT_GE(fd, 0) << name;
  EXPECT_EQ(ftruncate(fd, static_cast<off_t>(shm::segment_bytes(2))), 0);
  EXPECT_EQ(fchown(fd, uid, uid), 0);
  EXPECT_EQ(fchmod(fd, mode), 0);
  close(fd);
  return name;
}

std::string open_error(const std::string& name) {
  return test::error_of([&] { shm::Mapping::open(name, shm::segment_bytes(2)); });
}

TEST(ShmOwnership, SegmentsOfOtherUsersOrOpenToThemAreRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "giving a segment to another user needs root";
  const std::string theirs = make_segment(static_cast<int>(getpid()), 0x5ec0001, kOtherUid, 0600);
  const std::string open_one = make_segment(static_cast<int>(getpid()), 0x5ec0002, geteuid(), 0644);
  const std::string ours = make_segment(static_cast<int>(getpid()), 0x5ec0003, geteuid(), 0600);
  std::string error = open_error(theirs);
  EXPECT_NE(error.find("belongs to uid 54321, this process runs as uid 0"), std::string::npos) << error;
  error = open_error(open_one);
  EXPECT_NE(error.find("open to group or others (mode 0644)"), std::string::npos) << error;
  EXPECT_EQ(open_error(ours), "");
  for (const std::string& name : {theirs, open_one, ours}) platform::shm_remove(name);
}

TEST(ShmOwnership, TheSweepRemovesOnlyThisUsersSegmentsOfDeadOwners) {
  if (geteuid() != 0) GTEST_SKIP() << "giving a segment to another user needs root";
  const int dead = dead_pid();
  const std::string theirs = make_segment(dead, 0x5ec0011, kOtherUid, 0600);
  const std::string ours = make_segment(dead, 0x5ec0012, geteuid(), 0600);
  shm::remove_stale_segments();
  EXPECT_TRUE(exists(theirs)) << "another user's file went with the sweep";
  EXPECT_FALSE(exists(ours)) << "our dead rank's segment stayed";
  platform::shm_remove(theirs);
  platform::shm_remove(ours);
}

TEST(ShmOwnership, ASegmentMustComeFromThePeerTheRecordNames) {
  std::shared_ptr<transport::Device> device;
  for (auto& candidate : transport::available_devices()) {
    if (candidate->name() == "shm") device = candidate;
  }
  if (!device) GTEST_SKIP() << "no shm transport in this build";
  auto args_of = [](int rank, uint64_t comm_id = 0x0123456789) {
    transport::ContextArgs args{rank, 2, "ownership", "127.0.0.1", comm_id, 10};
    args.self = {rank, "ownership-host", 0, rank};
    return args;
  };
  auto rank0 = device->create_context(args_of(0));
  auto rank1 = device->create_context(args_of(1));
  const uint64_t ours = (uint64_t{static_cast<uint32_t>(getpid())} << 32) ^ 0x1234;
  transport::PeerAddress to1{1, rank1->address(), "", {1, "ownership-host", ours ^ (uint64_t{1} << 40), 1}};
  const std::string error = test::error_of([&] { rank0->connect({to1}, deadline_after(5)); });
  EXPECT_NE(error.find("was created by pid " + std::to_string(getpid())), std::string::npos) << error;
  EXPECT_NE(error.find("record names pid"), std::string::npos) << error;
  // The right pid: the two connect.
  auto again0 = device->create_context(args_of(0, 0x9876543210));
  auto again1 = device->create_context(args_of(1, 0x9876543210));
  transport::PeerAddress to0{0, again0->address(), "", {0, "ownership-host", ours, 0}};
  to1 = {1, again1->address(), "", {1, "ownership-host", ours, 1}};
  auto other = std::async(std::launch::async, [&] { return again1->connect({to0}, deadline_after(10)); });
  EXPECT_EQ(again0->connect({to1}, deadline_after(10)).size(), 1u);
  EXPECT_EQ(other.get().size(), 1u);
}

}  // namespace
}  // namespace tbcoll
