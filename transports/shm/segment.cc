#include "transports/shm/segment.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include "common/identity.h"
#include "tbcoll/error.hpp"

namespace tbcoll::shm {

std::string segment_name(int pid, uint64_t comm_id, int rank) {
  return fmt::format("/tbcoll-{:x}-{}-{:016x}-{}", pid_namespace(), pid, comm_id, rank);
}

Mapping Mapping::map(int fd, size_t bytes, const std::string& name) {
  // MAP_POPULATE: fault every page in now, not in the middle of a timed collective.
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  int saved = errno;
  close(fd);
  if (base == MAP_FAILED) throw IoError(fmt::format("[shm] cannot map {}: {}", name, strerror(saved)));
  return Mapping(base, bytes);
}

Mapping Mapping::create(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw IoError(fmt::format("[shm] cannot create {}: {}", name, strerror(errno)));
  // posix_fallocate, not just ftruncate: a tmpfs that is too small must fail here with a clear error, not
  // raise SIGBUS later when a page of the mapping is first touched.
  int rc = ftruncate(fd, static_cast<off_t>(bytes)) != 0 ? errno : posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    close(fd);
    shm_unlink(name.c_str());
    throw IoError(fmt::format("[shm] cannot allocate {} B for {}: {} (is /dev/shm big enough? see df /dev/shm)",
                              bytes, name, strerror(rc)));
  }
  try {
    return map(fd, bytes, name);
  } catch (...) {
    shm_unlink(name.c_str());
    throw;
  }
}

Mapping Mapping::open(const std::string& name, size_t bytes) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) throw IoError(fmt::format("[shm] cannot open {}: {}", name, strerror(errno)));
  struct stat info {};
  if (fstat(fd, &info) != 0 || static_cast<size_t>(info.st_size) < bytes) {
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

// The counters are lock-free 64-bit atomics in little-endian memory: their first 4 bytes are the low half.
static uint32_t* low_word(const std::atomic<uint64_t>* counter) {
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "counters must be plain memory");
  return reinterpret_cast<uint32_t*>(const_cast<std::atomic<uint64_t>*>(counter));
}

void futex_wait(const std::atomic<uint64_t>* counter, uint64_t expected, long timeout_us) {
  timespec timeout{timeout_us / 1000000, (timeout_us % 1000000) * 1000};
  syscall(SYS_futex, low_word(counter), FUTEX_WAIT, static_cast<uint32_t>(expected), &timeout, nullptr, 0);
}

void futex_wake(const std::atomic<uint64_t>* counter) {
  syscall(SYS_futex, low_word(counter), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

}  // namespace tbcoll::shm
