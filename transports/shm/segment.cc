#include "transports/shm/segment.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include "platform/platform.h"
#include "tbcoll/error.hpp"

namespace tbcoll::shm {

std::string segment_name(int pid, uint64_t comm_id, int rank) {
  // splitmix64 of the pair: communicators of one process (and ranks that are its threads) get distinct keys.
  uint64_t key = comm_id + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(rank) + 1);
  key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ull;
  key = (key ^ (key >> 27)) * 0x94d049bb133111ebull;
  return platform::shm_name(pid, key ^ (key >> 31));
}

std::string ownership_problem(uid_t owner, mode_t mode, uid_t us) {
  if (owner != us) return fmt::format("belongs to uid {}, this process runs as uid {}", owner, us);
  if ((mode & 077) != 0) return fmt::format("is open to group or others (mode {:04o})", mode & 07777);
  return "";
}

std::string owner_pid_problem(int32_t owner_pid, uint64_t peer_process_id) {
  if (peer_process_id == 0) return "";  // identity unknown (contexts made by hand in tests)
  const auto peer_pid = static_cast<int32_t>(peer_process_id >> 32);
  if (owner_pid == peer_pid) return "";
  return fmt::format("was created by pid {}, and the peer's rendezvous record names pid {}", owner_pid, peer_pid);
}

Mapping Mapping::map(int fd, size_t bytes, const std::string& name) {
  // Every page faulted in now, not in the middle of a timed collective.
  void* base = platform::shm_map(fd, bytes);
  if (base == nullptr) throw IoError(fmt::format("[shm] cannot map {}: {}", name, strerror(errno)));
  return Mapping(base, bytes);
}

Mapping Mapping::create(const std::string& name, size_t bytes) {
  int fd = platform::shm_create(name);
  if (fd < 0) throw IoError(fmt::format("[shm] cannot create {}: {}", name, strerror(errno)));
  // The memory is reserved now: a tmpfs that is too small must fail here with a clear error, not raise SIGBUS
  // later when a page of the mapping is first touched.
  int rc = platform::shm_reserve(fd, bytes);
  if (rc != 0) {
    close(fd);
    platform::shm_remove(name);
    throw IoError(fmt::format("[shm] cannot allocate {} B for {}: {} (is /dev/shm big enough? see df /dev/shm)",
                              bytes, name, strerror(rc)));
  }
  try {
    return map(fd, bytes, name);
  } catch (...) {
    platform::shm_remove(name);
    throw;
  }
}

Mapping Mapping::open(const std::string& name, size_t bytes) {
  int fd = platform::shm_open_existing(name);
  if (fd < 0) throw IoError(fmt::format("[shm] cannot open {}: {}", name, strerror(errno)));
  struct stat info {};
  if (fstat(fd, &info) != 0) {
    const int saved = errno;
    close(fd);
    throw IoError(fmt::format("[shm] cannot inspect segment {}: {}", name, strerror(saved)));
  }
  const std::string problem = ownership_problem(info.st_uid, info.st_mode, geteuid());
  if (!problem.empty()) {
    close(fd);
    throw IoError(fmt::format("[shm] segment {} {}: not one of this job's (another user's, or planted)", name, problem));
  }
  if (static_cast<size_t>(info.st_size) < bytes) {
    close(fd);
    throw IoError(fmt::format("[shm] segment {} is smaller than expected ({} B)", name, bytes));
  }
  return map(fd, bytes, name);
}

Mapping::Mapping(Mapping&& other) noexcept : base_(other.base_), bytes_(other.bytes_) {
  other.base_ = nullptr;
  other.bytes_ = 0;
}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) munmap(base_, bytes_);
    base_ = other.base_;
    bytes_ = other.bytes_;
    other.base_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

Mapping::~Mapping() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

// The counters are lock-free 64-bit atomics in little-endian memory (x86-64, arm64): their first 4 bytes are the
// low half.
static const void* low_word(const std::atomic<uint64_t>* counter) {
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "counters must be plain memory");
  return counter;
}

void sleep_on(const std::atomic<uint64_t>* counter, uint64_t expected, long timeout_us) {
  platform::wait_on_address(low_word(counter), static_cast<uint32_t>(expected), timeout_us);
}

void wake_sleepers(const std::atomic<uint64_t>* counter) { platform::wake_address(low_word(counter)); }

}  // namespace tbcoll::shm
