// The flight recorder (src/flight/recorder.h): each rank's file holds its last calls, per-peer figures and, once the
// communicator fails, why; a clean end removes it; an observer and a trace see every call.
#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collectives/harness.h"
#include "flight/flight_file.h"
#include "tools/doctor/report.h"
#include "tools/doctor/verdict.h"

namespace tbcoll::test {
namespace {

// A fresh directory under the test's temporary folder.
std::string fresh_dir(const std::string& name) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/tbcoll-flight-test-" + name + "-" +
                          std::to_string(getpid());
  std::system(("rm -rf '" + dir + "'").c_str());
  return dir;
}

size_t files_in(const std::string& dir, const std::string& suffix) {
  size_t n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* entry = readdir(d)) {
      const std::string name = entry->d_name;
      if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) ++n;
    }
    closedir(d);
  }
  return n;
}

RankOptions with_knobs(const std::string& transport, double timeout_s, std::map<std::string, std::string> knobs,
                       const std::string& algo = "") {
  RankOptions options{transport, algo, timeout_s};
  options.knobs = std::move(knobs);
  return options;
}

// Calls are recorded with their numbers, signatures, algorithms and outcomes; the ring keeps the last ones; the
// peers' figures count what the scheduled calls moved; a clean end leaves no file.
TEST(Flight, RecordsTheLastCallsAndPeerFigures) {
  const std::string dir = fresh_dir("ring");
  run_ranks(3, with_knobs("tcp", 20, {{"TBCOLL_FLIGHT_DIR", dir}, {"TBCOLL_FLIGHT_CALLS", "4"}},
                       "allreduce:ring"),
            [&](Communicator& comm) {
    std::vector<float> x(3000, 1.0f);
    for (int i = 0; i < 5; ++i) comm.all_reduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
    comm.broadcast(x.data(), x.data(), 7, DataType::kFloat32, 2);
    const flight::Dump dump = flight::read_file(comm.flight_file());
    EXPECT_EQ(dump.rank, comm.rank());
    EXPECT_EQ(dump.size, 3);
    EXPECT_EQ(dump.state, flight::State::kLive);
    EXPECT_EQ(dump.calls, 6u);
    EXPECT_EQ(dump.entered, 6u);
    EXPECT_EQ(dump.completed, 6u);
    ASSERT_EQ(dump.records.size(), 4u);  // the ring's last four
    EXPECT_EQ(dump.records.front().seq, 3u);
    EXPECT_EQ(dump.records[2].describe(), "all_reduce(count=3000, f32, sum)");
    EXPECT_EQ(dump.records[2].algorithm, "ring");
    EXPECT_EQ(dump.records.back().describe(), "broadcast(count=7, f32, root=2)");
    for (const flight::Call& call : dump.records) EXPECT_EQ(call.outcome, flight::Outcome::kOk) << call.describe();
    for (const flight::Peer& peer : dump.peers) {
      if (peer.rank == comm.rank()) continue;
      EXPECT_EQ(peer.transport, "tcp");
      EXPECT_GT(peer.messages, 0u) << "peer " << peer.rank;
    }
    uint64_t sent = 0;
    for (const flight::Peer& peer : dump.peers) sent += peer.sent_bytes;
    EXPECT_GE(sent, 5 * 2 * 3000 * 4 / 3) << "a ring all_reduce sends 2(n-1)/n of the buffer";
    comm.barrier();
  });
  EXPECT_EQ(files_in(dir, ".flight"), 0u) << "a clean end leaves no file";
}

// A call whose peer never comes: the waiting rank's file keeps the call as failed, the reason and the peer its wait
// was on; the late rank's never entered that call.
TEST(Flight, AFailureKeepsTheFileWithItsReason) {
  const std::string dir = fresh_dir("fail");
  std::atomic<bool> rank0_done{false};
  std::string kept;
  run_ranks(2, with_knobs("tcp", 1, {{"TBCOLL_FLIGHT_DIR", dir}}, "allreduce:ring"),
            [&](Communicator& comm) {
    std::vector<float> x(100, 1.0f);
    comm.all_reduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
    if (comm.rank() == 1) {
      const flight::Dump late = flight::read_file(comm.flight_file());
      EXPECT_EQ(late.entered, 1u);
      while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    EXPECT_THROW(comm.all_reduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum), TimeoutError);
    kept = comm.flight_file();
    const flight::Dump dump = flight::read_file(kept);
    EXPECT_EQ(dump.state, flight::State::kFailed);
    EXPECT_NE(dump.reason.find("timed out"), std::string::npos) << dump.reason;
    EXPECT_EQ(dump.stalled_on, 1);
    EXPECT_EQ(dump.entered, 2u);
    EXPECT_EQ(dump.completed, 1u);
    ASSERT_EQ(dump.records.size(), 2u);
    EXPECT_EQ(dump.records.back().outcome, flight::Outcome::kFailed);
    EXPECT_GE(dump.records.back().end_us - dump.records.back().start_us, 500000) << "waited about 1 s";
    rank0_done = true;
  });
  struct stat st {};
  EXPECT_EQ(stat(kept.c_str(), &st), 0) << kept << ": a failed rank's file stays";
  EXPECT_EQ(files_in(dir, ".flight"), 1u);
  std::system(("rm -rf '" + dir + "'").c_str());
}

// The observer sees each call begin and end, in order, with its number and algorithm; the trace holds one event
// per call per rank.
TEST(Flight, ObserverAndTraceSeeEveryCall) {
  const std::string dir = fresh_dir("trace");
  std::mutex mutex;
  std::vector<std::string> seen[2];
  run_ranks(2, with_knobs("shm", 20, {{"TBCOLL_TRACE", dir}}), [&](Communicator& comm) {
    const int r = comm.rank();
    comm.set_call_observer([&, r](const CallEvent& e) {
      std::lock_guard<std::mutex> lock(mutex);
      seen[r].push_back(std::string(e.phase == CallEvent::Phase::kBegin ? "begin " : "end ") + e.name + " #" +
                        std::to_string(e.seq) + (e.phase == CallEvent::Phase::kEnd && !e.ok ? " failed" : ""));
      if (e.phase == CallEvent::Phase::kEnd) {
        EXPECT_GE(e.seconds, 0.0);
      }
    });
    float v = 1.0f;
    for (int i = 0; i < 3; ++i) comm.all_reduce(&v, &v, 1, DataType::kFloat32, ReduceOp::kSum);
    comm.barrier();
    comm.set_call_observer(nullptr);
    comm.barrier();  // not seen
  });
  for (const auto& events : seen) {
    const std::vector<std::string> expected = {"begin all_reduce #1", "end all_reduce #1", "begin all_reduce #2",
                                               "end all_reduce #2", "begin all_reduce #3", "end all_reduce #3",
                                               "begin barrier #4", "end barrier #4"};
    EXPECT_EQ(events, expected);
  }
  ASSERT_EQ(files_in(dir, ".trace.json"), 2u);
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr);
  while (dirent* entry = readdir(d)) {
    const std::string name = entry->d_name;
    if (name.find(".trace.json") == std::string::npos) continue;
    std::ifstream in(dir + "/" + name);
    std::stringstream text;
    text << in.rdbuf();
    const std::string json = text.str();
    size_t events = 0;
    for (size_t at = json.find("\"ph\":\"X\""); at != std::string::npos; at = json.find("\"ph\":\"X\"", at + 1)) ++events;
    EXPECT_EQ(events, 5u) << name;  // three all_reduces and two barriers
    EXPECT_EQ(json.rfind("{\"traceEvents\":[", 0), 0u) << name;
    EXPECT_NE(json.find("\"algorithm\":\""), std::string::npos);
  }
  closedir(d);
  std::system(("rm -rf '" + dir + "'").c_str());
}

// One slow pair in a job of four (emulated: 20 ms more each way between ranks 1 and 3 only, far above the
// scheduling noise of four ranks on a loaded machine): read while the job runs, the live figures and the verdict
// name that link, not the ranks its lateness makes the others wait for.
TEST(Flight, TheFiguresNameASlowLink) {
  const std::string dir = fresh_dir("slow");
  RankOptions options = with_knobs("tcp", 30, {{"TBCOLL_FLIGHT_DIR", dir}}, "all_to_all:direct");
  options.knobs_per_rank = {{}, {{"TBCOLL_LINK_EMULATION", "latency_us=20000,peers=3"}}, {},
                            {{"TBCOLL_LINK_EMULATION", "latency_us=20000,peers=1"}}};
  std::string live, verdict;
  run_ranks(4, options, [&](Communicator& comm) {
    std::vector<float> send(4 * 4096, 1.0f), recv(send.size());
    for (int i = 0; i < 20; ++i) comm.all_to_all(send.data(), recv.data(), 4096, DataType::kFloat32);
    comm.barrier();
    if (comm.rank() == 0) {
      std::vector<flight::Dump> dumps;
      for (const std::string& path : flight::files_in(dir)) dumps.push_back(flight::read_file(path));
      ASSERT_EQ(dumps.size(), 4u);
      live = doctor::live(dumps);
      for (const std::string& line : doctor::verdict(dumps)) verdict += line + "\n";
    }
    comm.barrier();  // the files stay until rank 0 read them
  });
  EXPECT_NE(live.find("slowest link: 1<->3"), std::string::npos) << live;
  EXPECT_NE(verdict.find("link 1<->3 is"), std::string::npos) << verdict;
  for (const char* other : {"link 0<->1", "link 1<->2", "link 0<->3", "link 2<->3"}) {
    EXPECT_EQ(verdict.find(other), std::string::npos) << verdict;
  }
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(Flight, ZeroCallsTurnsItOff) {
  const std::string dir = fresh_dir("off");
  run_ranks(2, with_knobs("loopback", 20, {{"TBCOLL_FLIGHT_DIR", dir}, {"TBCOLL_FLIGHT_CALLS", "0"}}),
            [&](Communicator& comm) {
    EXPECT_EQ(comm.flight_file(), "");
    comm.barrier();
  });
  EXPECT_EQ(files_in(dir, ".flight"), 0u);
  const std::vector<std::string> errors = init_errors(2, [](int rank) {
    Config config;
    config.rank = rank;
    config.world_size = 2;
    config.transport = "loopback";
    config.knobs = {{"TBCOLL_FLIGHT_CALLS", "-3"}};
    return config;
  });
  for (const std::string& error : errors) EXPECT_NE(error.find("TBCOLL_FLIGHT_CALLS"), std::string::npos) << error;
}

}  // namespace
}  // namespace tbcoll::test
