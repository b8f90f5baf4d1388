// tbcoll-run and the flight recorder (tools/run/flight.h): each job's ranks write into a directory of the job's,
// which goes when the job succeeds; when it fails, tbcoll-doctor's verdict on the files follows tbcoll-run's own
// messages. Jobs of sh scripts that copy hand-written files (the launcher's part alone), and of real ranks.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "multiproc/output.h"
#include "unit/flight_writer.h"

#ifndef TBCOLL_RUN_PATH
#error "TBCOLL_RUN_PATH must name the tbcoll-run executable"
#endif

namespace tbcoll {
namespace {

// A directory of its own, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/tbcoll-run-flight-test-XXXXXX";
    if (mkdtemp(pattern) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    if (path_.empty()) return;
    const int ignored = std::system(("rm -rf '" + path_ + "'").c_str());
    (void)ignored;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// `environment tbcoll-run arguments`, through sh (arguments are shell words, quoted by the caller).
// launcher: the tbcoll-run to start (a copy, say).
Result run(const std::string& environment, const std::string& arguments,
           const std::string& launcher = TBCOLL_RUN_PATH) {
  const test::CommandOutput out =
      test::run_command("env -u TBCOLL_FLIGHT_DIR " + environment + " " + launcher + " " + arguments + " </dev/null");
  return Result{out.status, out.text};
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* listing = opendir(dir.c_str())) {
    for (dirent* entry; (entry = readdir(listing)) != nullptr;) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(listing);
  }
  return names;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The job directory tbcoll-run named in "the flight files are kept in DIR".
std::string kept_dir(const std::string& output) {
  const std::string marker = "tbcoll-run: the flight files are kept in ";
  const size_t at = output.find(marker);
  if (at == std::string::npos) return "";
  const size_t end = output.find('\n', at);
  return output.substr(at + marker.size(), end - at - marker.size());
}

// Three ranks' files of a job in which rank 1 never entered #6 and ranks 0 and 2 failed after 2 s waiting for it.
void write_stalled_files(const std::string& dir) {
  for (int r = 0; r < 3; ++r) {
    test::FlightFile file;
    file.rank = r;
    file.size = 3;
    file.pid = 999999999;  // no such process: the verdict must not depend on one
    for (uint64_t seq = 1; seq <= (r == 1 ? 5u : 6u); ++seq) {
      test::FlightCall call;
      call.seq = seq;
      call.count = 1024;
      call.op = ReduceOp::kMax;
      call.start_us = 1'765'000'000'000'000 + static_cast<int64_t>(seq) * 1000;
      call.end_us = call.start_us + (seq == 6 ? 2'000'000 : 100);
      call.outcome = seq == 6 ? flight::Outcome::kFailed : flight::Outcome::kOk;
      file.calls.push_back(call);
    }
    file.entered = file.calls.back().seq;
    file.completed = 5;
    file.updated_us = file.calls.back().end_us;
    if (r != 1) {
      file.state = flight::State::kFailed;
      file.reason = "[shm] rank " + std::to_string(r) + ": peer 1 not responding after 2 s in all_reduce";
    }
    ASSERT_TRUE(test::write_flight_file(dir + "/" + test::flight_file_name(file.comm_id, r), file));
  }
}

TEST(TbcollRunFlight, AFailedJobGetsTheDoctorsVerdictAndKeepsTheFiles) {
  TempDir prepared, tmp;
  ASSERT_FALSE(prepared.path().empty());
  ASSERT_FALSE(tmp.path().empty());
  write_stalled_files(prepared.path());
  // Rank 0 puts the files where the job's ranks write theirs, then fails.
  const std::string script = "'[ $TBCOLL_RANK = 0 ] && cp " + prepared.path() +
                             "/*.flight \"$TBCOLL_FLIGHT_DIR\" && "
                             "exit 3; sleep 30'";
  const Result result = run("TMPDIR=" + tmp.path(), "-n 2 -- sh -c " + script);
  EXPECT_EQ(result.exit_code, 3) << result.output;
  EXPECT_TRUE(contains(result.output, "tbcoll-run: rank 0 exited with status 3\n")) << result.output;
  EXPECT_TRUE(contains(result.output,
                       "tbcoll-run:   communicator 00000000000000ab (3 ranks), 3 files:\n"
                       "tbcoll-run:     rank 1 never entered all_reduce(count=1024, f32, max) #6 (its "
                       "last call: #5, completed); ranks 0, 2 waited 2.0 s for it\n"))
      << result.output;
  EXPECT_TRUE(contains(result.output,
                       "tbcoll-run:     rank 2 failed: [shm] rank 2: peer 1 not responding after 2 s "
                       "in all_reduce\n"))
      << result.output;
  const std::string dir = kept_dir(result.output);
  EXPECT_EQ(dir.rfind(tmp.path() + "/tbcoll-run-flight-", 0), 0u) << result.output;
  EXPECT_EQ(entries(dir).size(), 3u) << dir;
  struct stat st {};
  ASSERT_EQ(stat(dir.c_str(), &st), 0) << dir;
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

// A tbcoll-run with no tbcoll-doctor beside it or on PATH says so, and where the files are.
TEST(TbcollRunFlight, SaysSoWithoutADoctor) {
  TempDir prepared, alone;
  ASSERT_FALSE(prepared.path().empty());
  ASSERT_FALSE(alone.path().empty());
  write_stalled_files(prepared.path());
  const std::string copy = alone.path() + "/tbcoll-run";
  ASSERT_EQ(std::system(("cp " + std::string(TBCOLL_RUN_PATH) + " " + copy).c_str()), 0);
  // A PATH of the ranks' tools alone: no tbcoll-doctor, even where tbcoll is installed.
  const std::string tools = alone.path() + "/bin";
  ASSERT_EQ(
      std::system(
          ("mkdir " + tools + " && for t in sh cp sleep; do ln -s \"$(command -v $t)\" " + tools + "/; done").c_str()),
      0);
  const std::string script = "'[ $TBCOLL_RANK = 0 ] && cp " + prepared.path() +
                             "/*.flight \"$TBCOLL_FLIGHT_DIR\" && "
                             "exit 3; sleep 30'";
  const Result result = run("TMPDIR=" + alone.path() + " PATH=" + tools, "-n 2 -- sh -c " + script, copy);
  EXPECT_EQ(result.exit_code, 3) << result.output;
  EXPECT_TRUE(
      contains(result.output, "tbcoll-run: the flight files are kept in " + alone.path() + "/tbcoll-run-flight-"))
      << result.output;
  EXPECT_TRUE(contains(result.output, " (no tbcoll-doctor beside tbcoll-run or on PATH to read them)\n"))
      << result.output;
}

// Jobs whose ranks leave no file: nothing said, nothing left behind, failed or not.
TEST(TbcollRunFlight, AJobWithoutFlightFilesLeavesNoDirectory) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const Result ok = run("TMPDIR=" + tmp.path(), "-n 2 -- sh -c 'test -d \"$TBCOLL_FLIGHT_DIR\" && echo has-dir'");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_EQ(ok.output, "has-dir\nhas-dir\n");
  const Result failed = run("TMPDIR=" + tmp.path(), "-n 2 -- sh -c 'exit 3'");
  EXPECT_EQ(failed.exit_code, 3) << failed.output;
  EXPECT_FALSE(contains(failed.output, "flight")) << failed.output;
  EXPECT_TRUE(entries(tmp.path()).empty()) << entries(tmp.path()).front();
}

TEST(TbcollRunFlight, KeepsTheDirectoryTheUserChose) {
  TempDir chosen;
  ASSERT_FALSE(chosen.path().empty());
  const std::string mine = chosen.path() + "/mine";
  const Result result = run("TBCOLL_FLIGHT_DIR=" + mine, "-n 2 -- sh -c 'echo \"$TBCOLL_FLIGHT_DIR\"'");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output, mine + "\n" + mine + "\n");
}

// Multi-host: the ranks write on their hosts, and the failure message says where. The agent command runs the
// agent here (a stand-in for ssh that drops the host name).
TEST(TbcollRunFlight, AFailedMultiHostJobSaysWhereTheFilesAre) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string agent_command = dir.path() + "/here.sh";
  FILE* script = std::fopen(agent_command.c_str(), "w");
  ASSERT_NE(script, nullptr);
  std::fputs("#!/bin/sh\nshift\nexec \"$@\"\n", script);
  std::fclose(script);
  ASSERT_EQ(chmod(agent_command.c_str(), 0755), 0);
  const Result result =
      run("", "--hosts a:1,b:2 --launcher " + agent_command + " -- sh -c '[ $TBCOLL_RANK = 2 ] && exit 3; sleep 30'");
  EXPECT_EQ(result.exit_code, 3) << result.output;
  EXPECT_TRUE(contains(result.output,
                       "tbcoll-run: the ranks wrote their flight files on their own hosts (rank 0 on "
                       "a; ranks 1, 2 on b), in ${TMPDIR:-/tmp}/tbcoll-flight-<uid>"))
      << result.output;
}

// Real ranks: rank 1 sleeps 10 s before its 6th all_reduce; the others give up after TBCOLL_TIMEOUT=2 s.
TEST(TbcollRunFlight, NamesTheRankThatStoppedInARealJob) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const Result result = run("TMPDIR=" + tmp.path(),
                            std::string("-n 3 -x TBCOLL_TIMEOUT=2 -- ") + TBCOLL_TEST_PROG_PATH + " steady 20 1 10000");
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output,
                       "tbcoll-run:     rank 1 never entered all_reduce(count=1024, f32, max) #6 (its "
                       "last call: #5, completed); ranks 0, 2 waited "))
      << result.output;
  EXPECT_TRUE(contains(result.output, "tbcoll-run:     rank 0 failed")) << result.output;
  const std::string dir = kept_dir(result.output);
  EXPECT_FALSE(dir.empty()) << result.output;
  EXPECT_EQ(entries(dir).size(), 3u) << dir;
}

}  // namespace
}  // namespace tbcoll
