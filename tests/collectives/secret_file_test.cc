// The job secret's file (TBCOLL_SECRET_FILE) is read with bounds: type, size, mode and, for a pipe, time. And job
// tokens are compared in constant time.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>
#include <string>

#include "collectives/harness.h"
#include "common/auth.h"
#include "common/constant_time.h"
#include "common/env.h"

namespace tbcoll {
namespace {

std::string secret_of(const std::string& path) {
  return auth::job_secret(env::Settings(std::map<std::string, std::string>{{"TBCOLL_SECRET_FILE", path}}));
}

// The error of reading path as the secret file, "" when it was accepted; a read still running after 15 s fails the
// test (and is let go by writing to the FIFO, `unblock`).
std::string refusal(const std::string& path, const std::string& unblock = "") {
  auto reading = std::async(std::launch::async, [&] { return test::error_of([&] { secret_of(path); }); });
  if (reading.wait_for(std::chrono::seconds(15)) == std::future_status::ready) return reading.get();
  ADD_FAILURE() << path << ": the read of the secret file did not end";
  if (!unblock.empty()) close(open(unblock.c_str(), O_WRONLY | O_NONBLOCK));
  return reading.get();
}

struct TempDir {
  TempDir() {
    char name[] = "/tmp/tbcoll-secret-test-XXXXXX";
    path = mkdtemp(name);
  }
  ~TempDir() {
    std::string command = "rm -rf " + path;
    if (std::system(command.c_str()) != 0) ADD_FAILURE() << command;
  }
  std::string file(const std::string& name, const std::string& contents, mode_t mode) const {
    const std::string at = path + "/" + name;
    const int fd = open(at.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
    EXPECT_EQ(write(fd, contents.data(), contents.size()), static_cast<ssize_t>(contents.size()));
    fchmod(fd, mode);
    close(fd);
    return at;
  }
  std::string path;
};

TEST(SecretFile, DevicesDirectoriesAndLongFilesAreRefusedAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_NE(refusal("/dev/zero").find("not a regular file or a pipe"), std::string::npos) << "read until bad_alloc";
  EXPECT_NE(refusal("/dev/null").find("not a regular file or a pipe"), std::string::npos);
  TempDir dir;
  chmod(dir.path.c_str(), 0700);
  EXPECT_NE(refusal(dir.path).find("is a directory"), std::string::npos);
  EXPECT_NE(refusal(dir.file("long", std::string(5000, 's'), 0600)).find("longer than 4096 bytes"),
            std::string::npos);
  EXPECT_NE(refusal(dir.file("empty", "\n", 0600)).find("is empty"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

TEST(SecretFile, AFileOthersCanReadIsRefusedWithTheFix) {
  TempDir dir;
  const std::string open_file = dir.file("open", "a-secret-of-twenty-bytes\n", 0644);
  const std::string error = refusal(open_file);
  EXPECT_NE(error.find("open to group or others (mode 0644)"), std::string::npos) << error;
  EXPECT_NE(error.find("chmod 600 " + open_file), std::string::npos) << error;
  EXPECT_NE(refusal(dir.file("group", "a-secret-of-twenty-bytes\n", 0640)).find("mode 0640"), std::string::npos);
  if (!auth::available()) GTEST_SKIP() << "no libcrypto: a good file cannot be accepted";
  EXPECT_EQ(secret_of(dir.file("private", "a-secret-of-twenty-bytes\r\n", 0600)), "a-secret-of-twenty-bytes");
  EXPECT_EQ(secret_of(dir.file("read-only", "read-only-secret-0123", 0400)), "read-only-secret-0123");
}

// A 0600 file another user owns is refused: that user chose the secret (and can read it). Root can give a file
// away, so the test needs root.
TEST(SecretFile, AFileAnotherUserOwnsIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a file to another user";
  TempDir dir;
  const std::string theirs = dir.file("theirs", "a-secret-of-twenty-bytes\n", 0600);
  ASSERT_EQ(chown(theirs.c_str(), 65534, 65534), 0);
  const std::string error = refusal(theirs);
  EXPECT_NE(error.find("is owned by uid 65534, not by this user (uid 0) or root"), std::string::npos) << error;
}

TEST(SecretFile, APipeIsReadUntilItClosesAndASilentOneTimesOut) {
  TempDir dir;
  const std::string fifo = dir.path + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // No writer ever: refused once the pipe's time is up, not a hang.
  auto start = std::chrono::steady_clock::now();
  std::string error = refusal(fifo, fifo);
  EXPECT_NE(error.find("no end within 5 s"), std::string::npos) << error;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
  // A FIFO open to others is refused before anything is read from it.
  const std::string open_fifo = dir.path + "/open-fifo";
  ASSERT_EQ(mkfifo(open_fifo.c_str(), 0600), 0);
  chmod(open_fifo.c_str(), 0666);
  EXPECT_NE(refusal(open_fifo, open_fifo).find("mode 0666"), std::string::npos);
  if (!auth::available()) GTEST_SKIP() << "no libcrypto: a good pipe cannot be accepted";
  // A pipe whose writer delivers the secret, as `--secret-file <(pass show job)` does.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const std::string secret = "piped-secret-0123456789\n";
    EXPECT_EQ(write(fds[1], secret.data(), secret.size()), static_cast<ssize_t>(secret.size()));
    close(fds[1]);
  });
  EXPECT_EQ(secret_of("/dev/fd/" + std::to_string(fds[0])), "piped-secret-0123456789");
  writer.join();
  close(fds[0]);
}

TEST(ConstantTime, EqualityLooksAtEveryByte) {
  EXPECT_TRUE(constant_time_equal(std::string("right-token"), std::string("right-token")));
  EXPECT_FALSE(constant_time_equal(std::string("right-tokeN"), std::string("right-token")));
  EXPECT_FALSE(constant_time_equal(std::string("Right-token"), std::string("right-token")));
  EXPECT_FALSE(constant_time_equal(std::string("right"), std::string("right-token")));
  EXPECT_FALSE(constant_time_equal(std::string("right-token-and-more"), std::string("right-token")));
  EXPECT_FALSE(constant_time_equal(std::string(""), std::string("x")));
  EXPECT_TRUE(constant_time_equal(std::string(""), std::string("")));
  const std::string with_nul("a\0b", 3), other_nul("a\0c", 3);
  EXPECT_FALSE(constant_time_equal(with_nul, other_nul));
}

}  // namespace
}  // namespace tbcoll
