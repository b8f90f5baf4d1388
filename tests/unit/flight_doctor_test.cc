// The flight recorder's reader (src/flight/flight_file.h) on files written by hand in its layout, and
// tbcoll-doctor: its verdicts on made-up dumps, one per finding, and the program itself on a directory of files.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "flight/flight_file.h"
#include "multiproc/output.h"
#include "tbcoll/error.hpp"
#include "tools/doctor/report.h"
#include "tools/doctor/verdict.h"
#include "unit/flight_writer.h"

#ifndef TBCOLL_DOCTOR_PATH
#error "TBCOLL_DOCTOR_PATH must name the tbcoll-doctor executable"
#endif

namespace tbcoll {
namespace {

using flight::CallKind;
using flight::Dump;
using flight::Outcome;
using flight::State;
using test::FlightCall;
using test::FlightFile;

constexpr int64_t kT0 = 1'765'000'000'000'000;  // a Unix time in microseconds
constexpr uint64_t kMiB = 1 << 20;

// A directory of its own, removed with what is in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "tbcoll-flight-test-XXXXXX";
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    if (path_.empty()) return;
    if (DIR* dir = opendir(path_.c_str())) {
      for (dirent* entry; (entry = readdir(dir)) != nullptr;) unlink((path_ + "/" + entry->d_name).c_str());
      closedir(dir);
    }
    rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

flight::Call collective(uint64_t seq, const std::string& name, uint64_t count, const std::string& op, int root,
                        int64_t start_us, int64_t end_us, Outcome outcome = Outcome::kOk) {
  flight::Call call;
  call.seq = seq;
  call.name = name;
  call.count = count;
  call.dtype = "f32";
  call.op = op;
  call.root = root;
  call.start_us = start_us;
  call.end_us = end_us;
  call.outcome = outcome;
  call.algorithm = "ring";
  return call;
}

flight::Call all_reduce(uint64_t seq, uint64_t count, int64_t start_us, int64_t end_us,
                        Outcome outcome = Outcome::kOk) {
  return collective(seq, "all_reduce", count, "sum", -1, start_us, end_us, outcome);
}

Dump rank_dump(int rank, int size, uint64_t entered, uint64_t completed) {
  Dump dump;
  dump.path = "rank" + std::to_string(rank) + ".flight";
  dump.rank = rank;
  dump.size = size;
  dump.comm_id = 0xab;
  dump.host = "node";
  dump.entered = entered;
  dump.completed = completed;
  dump.calls = entered;
  for (int r = 0; r < size; ++r) {
    flight::Peer peer;
    peer.rank = r;
    peer.transport = r == rank ? "" : "shm";
    dump.peers.push_back(peer);
  }
  return dump;
}

bool has_line(const std::vector<std::string>& lines, const std::string& expected) {
  return std::find(lines.begin(), lines.end(), expected) != lines.end();
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

// ---- Call::describe ---------------------------------------------------------------------------------------

TEST(FlightCall, DescribesCallsAsErrorMessagesDo) {
  EXPECT_EQ(all_reduce(1, 1024, 0, 0).describe(), "all_reduce(count=1024, f32, sum)");
  flight::Call broadcast = collective(2, "broadcast", 8, "", 3, 0, 0);
  broadcast.dtype = "i8";
  EXPECT_EQ(broadcast.describe(), "broadcast(count=8, i8, root=3)");
  flight::Call send = collective(2, "send", 4, "", 1, 0, 0);
  send.kind = CallKind::kSend;
  EXPECT_EQ(send.describe(), "send(count=4, f32, peer=1)");
  EXPECT_EQ(collective(3, "barrier", 0, "", -1, 0, 0).describe(), "barrier()");
  EXPECT_EQ(collective(4, "all_to_allv", 96, "", -1, 0, 0).describe(), "all_to_allv(sent=96, f32)");
}

// ---- verdicts ---------------------------------------------------------------------------------------------

// Ranks 0, 1, 3 entered #1532 and waited 30 s; rank 2 completed #1531 and never came.
std::vector<Dump> stalled_job(double waited_s, State waiting_state) {
  std::vector<Dump> dumps;
  for (int r = 0; r < 4; ++r) {
    const bool stopped = r == 2;
    Dump dump = rank_dump(r, 4, stopped ? 1531 : 1532, 1531);
    dump.records.push_back(all_reduce(1531, 1024, kT0, kT0 + 2000));
    dump.updated_us = kT0 + 5000;
    if (!stopped) {
      const int64_t start = kT0 + 10'000;
      dump.updated_us = start + static_cast<int64_t>(waited_s * 1e6);
      dump.records.push_back(all_reduce(1532, 1024, start, 0, Outcome::kRunning));
      dump.state = waiting_state;
    }
    dumps.push_back(dump);
  }
  return dumps;
}

TEST(DoctorVerdict, NamesTheRankThatNeverEnteredAndHowLongTheOthersWaited) {
  const std::vector<std::string> lines = doctor::verdict(stalled_job(30, State::kLive));
  EXPECT_TRUE(has_line(lines,
                       "rank 2 never entered all_reduce(count=1024, f32, sum) #1532 (its last call: #1531, "
                       "completed); ranks 0, 1, 3 waited 30.0 s for it"))
      << joined(lines);
  EXPECT_EQ(lines.size(), 1u) << joined(lines);
}

TEST(DoctorVerdict, UsesTheEndOfAWaitThatFailedAndGivesEachFailedRanksReason) {
  std::vector<Dump> dumps = stalled_job(0, State::kFailed);
  for (Dump& dump : dumps) {
    if (dump.rank == 2) continue;
    dump.records.back().end_us = dump.records.back().start_us + 29'900'000;
    dump.records.back().outcome = Outcome::kFailed;
    dump.updated_us += 40'000'000;  // later writes must not count as waiting
    dump.stalled_on = 2;
    dump.reason = "[shm] rank " + std::to_string(dump.rank) + ": peer 2 not responding after 30 s in all_reduce";
  }
  const std::vector<std::string> lines = doctor::verdict(dumps);
  EXPECT_TRUE(has_line(lines,
                       "rank 2 never entered all_reduce(count=1024, f32, sum) #1532 (its last call: #1531, "
                       "completed); ranks 0, 1, 3 waited 29.9 s for it"))
      << joined(lines);
  EXPECT_TRUE(has_line(lines,
                       "rank 1 failed (its wait on rank 2 passed the deadline): [shm] rank 1: peer 2 not "
                       "responding after 30 s in all_reduce"))
      << joined(lines);
  EXPECT_EQ(lines.size(), 4u) << joined(lines);
}

// A rank stopped inside a call (SIGSTOP in a ring): its neighbours' waits end at it, and a rank that waited for one
// of them is named as waiting through them.
TEST(DoctorVerdict, FollowsTheWaitsToTheRankThatStoppedInsideACall) {
  std::vector<Dump> dumps;
  for (int r = 0; r < 4; ++r) {
    Dump dump = rank_dump(r, 4, r == 1 || r == 3 ? 8 : 7, r == 2 || r == 0 ? 6 : 7);
    for (uint64_t seq = 5; seq <= dump.entered; ++seq) {
      const bool last = seq == dump.entered && dump.completed < seq;
      dump.records.push_back(all_reduce(seq, 1024, kT0 + 1000 * static_cast<int64_t>(seq),
                                        last && r != 2 ? kT0 + 1000 * static_cast<int64_t>(seq) + 5'000'000 : 0,
                                        !last ? Outcome::kOk : r == 2 ? Outcome::kRunning : Outcome::kFailed));
    }
    if (r != 2) {
      dump.state = State::kFailed;
      dump.stalled_on = r == 1 ? 0 : 2;
      dump.reason = "timed out waiting for peer " + std::to_string(dump.stalled_on);
      if (r != 0) {  // ranks 1 and 3 went on to #8 and waited there
        dump.records.back().outcome = Outcome::kFailed;
        dump.records.back().end_us = dump.records.back().start_us + 5'000'000;
      }
    }
    dumps.push_back(dump);
  }
  const std::vector<std::string> lines = doctor::verdict(dumps);
  EXPECT_TRUE(has_line(lines,
                       "rank 2 stopped inside all_reduce(count=1024, f32, sum) #7 and never finished it; ranks 0, 3 "
                       "waited 5.0 s for it, rank 1 for them"))
      << joined(lines);
  EXPECT_EQ(lines.size(), 4u) << joined(lines);  // and the three failures
}

// A live job read between two ranks' entries into the same call is not stalled.
TEST(DoctorVerdict, AShortWaitInALiveJobIsNoStall) {
  const std::vector<std::string> lines = doctor::verdict(stalled_job(0.2, State::kLive));
  ASSERT_EQ(lines.size(), 1u) << joined(lines);
  EXPECT_EQ(lines[0], "all 4 ranks completed 1531 collectives; nothing looks wrong");
}

// Rank 1 killed between #20 and #21, the others ended by the launcher at once: a stall however short, once the
// processes are known to be gone.
TEST(DoctorVerdict, AStallOfRanksThatAreGoneCountsHoweverShort) {
  std::vector<Dump> dumps;
  for (int r = 0; r < 3; ++r) {
    Dump dump = rank_dump(r, 3, r == 1 ? 20 : 21, 20);
    dump.records.push_back(all_reduce(20, 1024, kT0, kT0));
    if (r != 1) dump.records.push_back(all_reduce(21, 1024, kT0, 0, Outcome::kRunning));
    dump.updated_us = kT0 + 3000;
    dumps.push_back(dump);
  }
  EXPECT_EQ(doctor::verdict(dumps, {0, 1, 2}),
            (std::vector<std::string>{"rank 1 never entered all_reduce(count=1024, f32, sum) #21 (its last call: #20, "
                                      "completed); ranks 0, 2 waited 0.0 s for it",
                                      "ranks 0, 1, 2 ended without closing their files (their processes are gone: "
                                      "killed, or crashed)"}));
  EXPECT_EQ(doctor::verdict(dumps, {1}).at(1),
            "rank 1 ended without closing its file (its process is gone: killed, or crashed)");
  EXPECT_EQ(doctor::verdict(dumps), std::vector<std::string>{"all 3 ranks completed 20 collectives; nothing looks "
                                                             "wrong"});
}

TEST(DoctorVerdict, NamesTheFirstCallTheRanksDisagreeOn) {
  std::vector<Dump> dumps;
  for (int r = 0; r < 3; ++r) {
    Dump dump = rank_dump(r, 3, 88, 87);
    dump.records.push_back(all_reduce(87, 4, kT0, kT0 + 10));
    dump.records.push_back(r == 2 ? collective(88, "broadcast", 4, "", 0, kT0 + 20, 0, Outcome::kRunning)
                                  : all_reduce(88, 4, kT0 + 20, 0, Outcome::kRunning));
    dump.records.push_back(r == 2 ? all_reduce(89, 4, kT0 + 30, 0, Outcome::kRunning)
                                  : collective(89, "barrier", 0, "", -1, kT0 + 30, 0, Outcome::kRunning));
    dumps.push_back(dump);
  }
  const std::vector<std::string> lines = doctor::verdict(dumps);
  EXPECT_TRUE(has_line(lines,
                       "ranks disagree at #88: ranks 0, 1 called all_reduce(count=4, f32, sum); rank 2 "
                       "called broadcast(count=4, f32, root=0)"))
      << joined(lines);
  EXPECT_EQ(lines.size(), 1u) << "only the first disagreement:\n" << joined(lines);
}

// 4 ranks, 8 MiB each way on every link; every link waited 20 us per MiB moved but 1<->3, `slow_us` per MiB.
std::vector<Dump> links_job(uint64_t slow_us_per_mib, bool only_two_links = false) {
  std::vector<Dump> dumps;
  for (int r = 0; r < 4; ++r) dumps.push_back(rank_dump(r, 4, 100, 100));
  for (int a = 0; a < 4; ++a) {
    for (int b = 0; b < 4; ++b) {
      if (a == b || (only_two_links && a + b != 1 && a + b != 5)) continue;
      const bool slow = (a == 1 && b == 3) || (a == 3 && b == 1);
      flight::Peer& peer = dumps[static_cast<size_t>(a)].peers[static_cast<size_t>(b)];
      peer.sent_bytes = peer.received_bytes = 8 * kMiB;
      peer.wait_us = 8 * (slow ? slow_us_per_mib : 20);  // both ends: 16 MiB moved, 16 x the rate waited
    }
  }
  return dumps;
}

TEST(DoctorVerdict, NamesALinkFarSlowerThanTheOthers) {
  const std::vector<std::string> lines = doctor::verdict(links_job(800));
  EXPECT_TRUE(has_line(lines,
                       "link 1<->3 is 40x slower than the others: 800 us waited per MiB vs 20 us (median of "
                       "the other links)"))
      << joined(lines);
  EXPECT_EQ(lines.size(), 1u) << joined(lines);
}

TEST(DoctorVerdict, NamesNoLinkWhenNoneStandsOutOrTooFewMovedBytes) {
  for (const auto& dumps : {links_job(80), links_job(20), links_job(800, true)}) {
    const std::vector<std::string> lines = doctor::verdict(dumps);
    ASSERT_EQ(lines.size(), 1u) << joined(lines);
    EXPECT_EQ(lines[0], "all 4 ranks completed 100 collectives; nothing looks wrong");
  }
  EXPECT_EQ(doctor::slow_links(links_job(99)).size(), 0u) << "4.95x the median is under 5x";
  EXPECT_EQ(doctor::slow_links(links_job(100)).size(), 1u) << "5x the median is named";
}

TEST(DoctorVerdict, NamesARankWithoutAFile) {
  std::vector<Dump> dumps;
  for (int r : {0, 1, 3}) dumps.push_back(rank_dump(r, 4, 10, 10));
  const std::vector<std::string> lines = doctor::verdict(dumps);
  EXPECT_TRUE(has_line(lines,
                       "no flight file of rank 2 (it never created this communicator, wrote elsewhere, or its "
                       "host's files were not collected)"))
      << joined(lines);
  EXPECT_EQ(lines.size(), 1u) << joined(lines);
}

TEST(DoctorVerdict, SaysHowManyCallsAllRanksCompletedWhenNothingIsWrong) {
  std::vector<Dump> dumps;
  for (int r = 0; r < 3; ++r) {
    dumps.push_back(rank_dump(r, 3, 100, 100));
    dumps.back().state = State::kFinished;
  }
  EXPECT_EQ(doctor::verdict(dumps),
            std::vector<std::string>{"all 3 ranks completed 100 collectives and destroyed the communicator; nothing "
                                     "looks wrong"});
}

// Rank 2 starts 20 ms after the others at 8 of 10 calls; starts within a clock tick are a tie.
TEST(DoctorVerdict, NamesTheRankThatArrivesLastAtMostCalls) {
  auto job = [](int64_t lateness_us) {
    std::vector<Dump> dumps;
    for (int r = 0; r < 3; ++r) {
      Dump dump = rank_dump(r, 3, 10, 10);
      for (uint64_t seq = 1; seq <= 10; ++seq) {
        const int64_t start = kT0 + static_cast<int64_t>(seq) * 100'000 + (r == 2 && seq <= 8 ? lateness_us : 0);
        dump.records.push_back(all_reduce(seq, 4, start, start + 1000));
      }
      dumps.push_back(dump);
    }
    return dumps;
  };
  const std::vector<std::string> lines = doctor::verdict(job(20'000));
  EXPECT_TRUE(has_line(lines,
                       "rank 2 arrived last at 8 of the 10 calls all ranks recorded (20.0 ms after the first "
                       "on average)"))
      << joined(lines);
  EXPECT_EQ(doctor::verdict(job(4'000)).size(), 1u) << "within the clock's tick";
}

TEST(DoctorVerdict, GroupsDumpsByCommunicatorKeepingEachRanksLatest) {
  std::vector<Dump> dumps = {rank_dump(1, 2, 5, 5), rank_dump(0, 2, 5, 5), rank_dump(0, 2, 7, 7)};
  dumps[2].updated_us = 10;
  dumps.push_back(rank_dump(0, 1, 1, 1));
  dumps.back().comm_id = 0xcd;
  const auto grouped = doctor::by_communicator(dumps);
  ASSERT_EQ(grouped.size(), 2u);
  ASSERT_EQ(grouped.at(0xab).size(), 2u);
  EXPECT_EQ(grouped.at(0xab)[0].rank, 0);
  EXPECT_EQ(grouped.at(0xab)[0].entered, 7u);
  EXPECT_EQ(grouped.at(0xcd).size(), 1u);
}

// ---- reading files ----------------------------------------------------------------------------------------

FlightFile two_rank_file() {
  FlightFile file;
  file.rank = 1;
  file.size = 2;
  file.capacity = 4;
  file.comm_id = 0x0123456789abcdef;
  file.host = "mac-mini-2";
  file.created_us = kT0;
  file.updated_us = kT0 + 7000;
  file.state = State::kFailed;
  file.stalled_on = 0;
  file.entered = 5;
  file.completed = 4;
  file.reason = "[tcp] rank 1: peer 0 not responding after 30 s in all_reduce";
  file.peers = {{"tcp", 100, 200, 3, 40, 2}, {}};
  for (uint64_t i = 1; i <= 5; ++i) {
    FlightCall call;
    call.seq = i;
    call.count = 16 * i;
    call.start_us = kT0 + static_cast<int64_t>(i) * 1000;
    call.end_us = i < 5 ? call.start_us + 500 : 0;
    call.outcome = i < 5 ? Outcome::kOk : Outcome::kRunning;
    if (i == 3) {
      call.name = "broadcast";
      call.root = 0;
    }
    file.calls.push_back(call);
    if (i == 4) {
      FlightCall send = call;
      send.name = "send";
      send.kind = CallKind::kSend;
      send.root = 0;
      send.dtype = DataType::kInt8;
      file.calls.push_back(send);
    }
  }
  return file;
}

TEST(FlightFileRead, ReadsBackWhatTheWriterLaidOut) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.path() + "/" + test::flight_file_name(0x0123456789abcdef, 1);
  ASSERT_TRUE(test::write_flight_file(path, two_rank_file()));
  const Dump dump = flight::read_file(path);
  EXPECT_EQ(dump.path, path);
  EXPECT_EQ(dump.rank, 1);
  EXPECT_EQ(dump.size, 2);
  EXPECT_EQ(dump.comm_id, 0x0123456789abcdefu);
  EXPECT_EQ(dump.pid, 4242);
  EXPECT_EQ(dump.host, "mac-mini-2");
  EXPECT_EQ(dump.created_us, kT0);
  EXPECT_EQ(dump.updated_us, kT0 + 7000);
  EXPECT_EQ(dump.state, State::kFailed);
  EXPECT_EQ(dump.stalled_on, 0);
  EXPECT_EQ(dump.calls, 6u);
  EXPECT_EQ(dump.entered, 5u);
  EXPECT_EQ(dump.completed, 4u);
  EXPECT_EQ(dump.reason, "[tcp] rank 1: peer 0 not responding after 30 s in all_reduce");
  ASSERT_EQ(dump.peers.size(), 2u);
  EXPECT_EQ(dump.peers[0].transport, "tcp");
  EXPECT_EQ(dump.peers[0].sent_bytes, 100u);
  EXPECT_EQ(dump.peers[0].received_bytes, 200u);
  EXPECT_EQ(dump.peers[0].messages, 3u);
  EXPECT_EQ(dump.peers[0].wait_us, 40u);
  EXPECT_EQ(dump.peers[0].waits, 2u);
  EXPECT_EQ(dump.peers[1].transport, "");
  // Six calls in a ring of four: the last four, oldest first.
  std::vector<std::string> described;
  for (const flight::Call& call : dump.records) described.push_back(call.describe());
  EXPECT_EQ(described, (std::vector<std::string>{"broadcast(count=48, f32, root=0)", "all_reduce(count=64, f32, sum)",
                                                 "send(count=64, i8, peer=0)", "all_reduce(count=80, f32, sum)"}));
  ASSERT_EQ(dump.records.size(), 4u);
  EXPECT_EQ(dump.records[0].seq, 3u);
  EXPECT_EQ(dump.records[2].kind, CallKind::kSend);
  EXPECT_EQ(dump.records[2].seq, 4u);
  EXPECT_EQ(dump.records[3].outcome, Outcome::kRunning);
  EXPECT_EQ(dump.records[3].end_us, 0);
  EXPECT_EQ(dump.records[1].algorithm, "ring");
  EXPECT_EQ(dump.records[1].start_us, kT0 + 4000);
  EXPECT_EQ(dump.records[1].end_us, kT0 + 4500);
}

TEST(FlightFileRead, LeavesOutARecordBeingWritten) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  FlightFile file = two_rank_file();
  file.last_call_being_written = true;
  const std::string path = dir.path() + "/writing.flight";
  ASSERT_TRUE(test::write_flight_file(path, file));
  const Dump dump = flight::read_file(path);
  ASSERT_EQ(dump.records.size(), 3u);
  EXPECT_EQ(dump.records.back().kind, CallKind::kSend);
}

// read_file's error for a file made by `write`, which must name the path and contain `what`.
void expect_refused(const std::string& path, const std::string& what) {
  try {
    flight::read_file(path);
    ADD_FAILURE() << path << " was read";
  } catch (const InvalidArgument& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(what), std::string::npos) << message;
  }
}

TEST(FlightFileRead, RefusesTruncatedForeignAndOtherVersionFiles) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const FlightFile file = two_rank_file();
  const size_t whole = flight::file_bytes(file.size, file.capacity);
  ASSERT_TRUE(test::write_flight_file(dir.path() + "/short.flight", file, whole - 1));
  expect_refused(dir.path() + "/short.flight", "truncated");
  ASSERT_TRUE(test::write_flight_file(dir.path() + "/header.flight", file, 100));
  expect_refused(dir.path() + "/header.flight", "truncated");
  FILE* text = std::fopen((dir.path() + "/notes.flight").c_str(), "w");
  ASSERT_NE(text, nullptr);
  std::fputs("these are not the records you are looking for\n", text);
  std::fclose(text);
  expect_refused(dir.path() + "/notes.flight", "not a flight file");
  ASSERT_TRUE(test::write_flight_file(dir.path() + "/empty.flight", file, 0));
  expect_refused(dir.path() + "/empty.flight", "not a flight file");
  FlightFile newer = file;
  newer.version = flight::kVersion + 1;
  ASSERT_TRUE(test::write_flight_file(dir.path() + "/newer.flight", newer));
  expect_refused(dir.path() + "/newer.flight", "version " + std::to_string(flight::kVersion + 1));
  FlightFile bad_rank = file;
  bad_rank.rank = 2;
  ASSERT_TRUE(test::write_flight_file(dir.path() + "/rank.flight", bad_rank));
  expect_refused(dir.path() + "/rank.flight", "sizes inconsistent");
  expect_refused(dir.path() + "/missing.flight", "cannot open");
}

TEST(FlightFileRead, ListsTheFlightFilesOfADirectory) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  for (const char* name : {"b.flight", "a.flight", "notes.txt", "flight"}) {
    ASSERT_TRUE(test::write_flight_file(dir.path() + "/" + name, two_rank_file()));
  }
  EXPECT_EQ(flight::files_in(dir.path()),
            (std::vector<std::string>{dir.path() + "/a.flight", dir.path() + "/b.flight"}));
  EXPECT_THROW(flight::files_in(dir.path() + "/none"), InvalidArgument);
}

// ---- tbcoll-doctor, the program ---------------------------------------------------------------------------

using Output = test::CommandOutput;

Output doctor_run(const std::string& arguments) {
  return test::run_command(std::string(TBCOLL_DOCTOR_PATH) + " " + arguments);
}

// The stalled job of the verdict tests as files: ranks 0, 1, 3 failed in #1532 after 30 s, rank 2 never entered.
void write_stalled_job(const std::string& dir) {
  for (int r = 0; r < 4; ++r) {
    FlightFile file;
    file.rank = r;
    file.size = 4;
    file.created_us = kT0;
    file.peers.assign(4, {"shm", 4 * kMiB, 4 * kMiB, 100, 2000, 100});
    file.peers[static_cast<size_t>(r)] = {};
    if (r == 1 || r == 3) file.peers[r == 1 ? 3 : 1].wait_us = 400'000;  // link 1<->3 is slow
    for (uint64_t seq = 1530; seq <= (r == 2 ? 1531u : 1532u); ++seq) {
      FlightCall call;
      call.seq = seq;
      call.count = 1024;
      call.start_us = kT0 + static_cast<int64_t>(seq - 1530) * 1000;
      call.end_us = seq < 1532 ? call.start_us + 900 : call.start_us + 30'000'000;
      call.outcome = seq < 1532 ? Outcome::kOk : Outcome::kFailed;
      file.calls.push_back(call);
    }
    file.entered = file.calls.back().seq;
    file.completed = 1531;
    file.updated_us = file.calls.back().end_us;
    if (r != 2) {
      file.state = State::kFailed;
      file.stalled_on = 2;
      file.reason = "[shm] rank " + std::to_string(r) + ": peer 2 not responding after 30 s in all_reduce";
    }
    ASSERT_TRUE(test::write_flight_file(dir + "/" + test::flight_file_name(file.comm_id, r), file));
  }
}

TEST(DoctorProgram, GivesTheVerdictOnADirectory) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  write_stalled_job(dir.path());
  const Output out = doctor_run(dir.path());
  EXPECT_EQ(out.status, 0) << out.text;
  EXPECT_NE(out.text.find("communicator 00000000000000ab (4 ranks), 4 files:\n"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("\n  rank 2 never entered all_reduce(count=1024, f32, sum) #1532 (its last call: #1531, "
                          "completed); ranks 0, 1, 3 waited 30.0 s for it\n"),
            std::string::npos)
      << out.text;
  EXPECT_NE(out.text.find("\n  rank 3 failed (its wait on rank 2 passed the deadline): [shm] rank 3: peer 2 not "
                          "responding after 30 s in all_reduce\n"),
            std::string::npos)
      << out.text;
  EXPECT_NE(out.text.find("\n  link 1<->3 is"), std::string::npos) << out.text;
  // Without rank 2's file, and with a file that is none.
  ASSERT_EQ(unlink((dir.path() + "/" + test::flight_file_name(0xab, 2)).c_str()), 0);
  FILE* junk = std::fopen((dir.path() + "/junk.flight").c_str(), "w");
  ASSERT_NE(junk, nullptr);
  std::fclose(junk);
  const Output without = doctor_run(dir.path());
  EXPECT_NE(without.text.find("  no flight file of rank 2 ("), std::string::npos) << without.text;
  EXPECT_NE(without.text.find("skipped: flight file " + dir.path() + "/junk.flight: not a flight file"),
            std::string::npos)
      << without.text;
}

TEST(DoctorProgram, ShowsAFileAndTheLiveFigures) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  write_stalled_job(dir.path());
  const std::string file = dir.path() + "/" + test::flight_file_name(0xab, 1);
  const Output shown = doctor_run("show " + file);
  EXPECT_EQ(shown.status, 0) << shown.text;
  for (const char* expected : {"rank 1 of 4, communicator 00000000000000ab, host node, pid 4242",
                               "state: failed (its wait on rank 2 passed the deadline)",
                               "reason: [shm] rank 1: peer 2 not responding after 30 s in all_reduce",
                               "collectives: entered #1532, completed #1531; 3 calls begun, the last 3 recorded",
                               "       3  shm", "#1532        all_reduce(count=1024, f32, sum)         ring"}) {
    EXPECT_NE(shown.text.find(expected), std::string::npos) << expected << " in\n" << shown.text;
  }
  EXPECT_NE(shown.text.find("failed   "), std::string::npos) << shown.text;
  EXPECT_NE(shown.text.find("30.0 s\n"), std::string::npos) << shown.text;
  const Output live = doctor_run("live " + dir.path() + " --every 0.05 --times 2");
  EXPECT_EQ(live.status, 0) << live.text;
  EXPECT_NE(live.text.find("  rank 1 (host node, pid 4242, failed): 3 calls, collectives entered #1532, completed "
                           "#1531\n    peer 0 via shm: sent 4.0 MiB, received 4.0 MiB, 100 messages, waited 2.0 ms "
                           "in 100 waits\n"),
            std::string::npos)
      << live.text;
  EXPECT_NE(live.text.find("slowest link: 1<->3, "), std::string::npos) << live.text;
  size_t rounds = 0;
  for (size_t at = 0; (at = live.text.find("communicator 00000000000000ab", at)) != std::string::npos; ++at) ++rounds;
  EXPECT_EQ(rounds, 2u) << live.text;
}

TEST(DoctorProgram, SaysWhenThereAreNoFilesAndRefusesBadArguments) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const Output empty = doctor_run(dir.path());
  EXPECT_EQ(empty.status, 1) << empty.text;
  EXPECT_NE(empty.text.find("no flight files in " + dir.path()), std::string::npos) << empty.text;
  const Output by_default = doctor_run("");
  EXPECT_TRUE(by_default.status == 0 || by_default.status == 1) << by_default.text;
  EXPECT_EQ(doctor_run("--frobnicate").status, 2);
  EXPECT_EQ(doctor_run("show").status, 2);
  EXPECT_EQ(doctor_run("live --every x").status, 2);
  EXPECT_EQ(doctor_run("show " + dir.path() + "/none.flight").status, 1);
}

}  // namespace
}  // namespace tbcoll
