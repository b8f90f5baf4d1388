// What every flavour shares: POSIX.1-2008 calls only (the posix flavour is this file and little else).
#include "platform/generic.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <utility>

namespace tbcoll::platform {

// ---- processes -----------------------------------------------------------------------------------------------------

ProcessWatch::ProcessWatch(int pid) : pid_(pid) {
  if (pid_ != getpid()) fd_ = open_process_watch(pid_);
}
ProcessWatch::ProcessWatch(ProcessWatch&& other) noexcept
    : pid_(other.pid_), fd_(std::exchange(other.fd_, -1)), exited_(other.exited_.load()) {}
ProcessWatch& ProcessWatch::operator=(ProcessWatch&& other) noexcept {
  std::swap(pid_, other.pid_);
  std::swap(fd_, other.fd_);
  const bool theirs = other.exited_.load();
  other.exited_.store(exited_.load());
  exited_.store(theirs);
  return *this;
}
ProcessWatch::~ProcessWatch() {
  if (fd_ >= 0) close(fd_);
}

bool ProcessWatch::exited() const {
  if (pid_ == getpid()) return false;
  if (exited_.load(std::memory_order_relaxed)) return true;  // a kqueue reports the exit once
  const bool gone = fd_ >= 0 ? watched_process_exited(fd_) : !process_exists(pid_);
  if (gone) exited_.store(true, std::memory_order_relaxed);
  return gone;
}

bool process_exists(int pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

// ---- network interfaces ------------------------------------------------------------------------------------------

// The length of an interface address's netmask in bits, -1 without one.
static int prefix_of(const ifaddrs* at) {
  if (at->ifa_netmask == nullptr || at->ifa_netmask->sa_family != at->ifa_addr->sa_family) return -1;
  const auto* bytes = at->ifa_addr->sa_family == AF_INET
                          ? reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(at->ifa_netmask)->sin_addr)
                          : reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(at->ifa_netmask)->sin6_addr);
  const int count = at->ifa_addr->sa_family == AF_INET ? 4 : 16;
  int bits = 0;
  for (int i = 0; i < count; ++i) bits += __builtin_popcount(bytes[i]);
  return bits;
}

std::vector<NetworkInterface> network_interfaces() {
  std::vector<NetworkInterface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (const ifaddrs* at = list; at != nullptr; at = at->ifa_next) {
    if (at->ifa_addr == nullptr || (at->ifa_flags & IFF_UP) == 0) continue;
    const int family = at->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    if (family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(at->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&v6->sin6_addr)) continue;  // needs a scope id in every address: not for peers
    }
    char host[NI_MAXHOST] = {};
    const socklen_t length = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (getnameinfo(at->ifa_addr, length, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) continue;
    out.push_back({at->ifa_name, host, family == AF_INET6, (at->ifa_flags & IFF_LOOPBACK) != 0, prefix_of(at)});
  }
  freeifaddrs(list);
  return out;
}

// ---- shared-memory segment names -----------------------------------------------------------------------------

std::string shm_name(int owner_pid, uint64_t key) {
  char name[48];
  std::snprintf(name, sizeof(name), "/tb%06" PRIx32 "-%x-%012" PRIx64, pid_namespace_tag() & 0xffffffu,
                static_cast<unsigned>(owner_pid), static_cast<uint64_t>(key & 0xffffffffffffull));
  return name;
}

bool shm_name_owner(const std::string& name, int* owner_pid) {
  const char* text = name.c_str();
  if (*text == '/') ++text;
  unsigned tag = 0, pid = 0;
  uint64_t key = 0;
  int consumed = 0;
  if (std::sscanf(text, "tb%6x-%x-%12" SCNx64 "%n", &tag, &pid, &key, &consumed) != 3) return false;
  if (text[consumed] != '\0' || std::strlen(text) + 1 > kMaxShmNameChars) return false;
  if (pid_namespace_tag() == 0 || tag != pid_namespace_tag() || pid == 0 || pid > 0x7fffffffu) return false;
  *owner_pid = static_cast<int>(pid);
  return true;
}

int shm_create(const std::string& name) {
  // Recorded first: a process killed between the two steps leaves an entry the sweep drops, not a segment
  // nobody can find.
  if (uses_shm_registry()) generic::registry_add(name);
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  const int saved = errno;
  if (fd < 0) {
    if (uses_shm_registry() && saved != EEXIST) generic::registry_remove(name);
    errno = saved;
    return -1;
  }
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
}

int shm_open_existing(const std::string& name) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd >= 0) fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
}

int shm_remove(const std::string& name) {
  const int rc = shm_unlink(name.c_str());
  const int saved = errno;
  if (uses_shm_registry() && (rc == 0 || saved == ENOENT)) generic::registry_remove(name);
  errno = saved;
  return rc;
}

namespace generic {

std::chrono::steady_clock::time_point precise_now() { return std::chrono::steady_clock::now(); }

void sleep_while_equal(const void* word, uint32_t expected, long timeout_us) {
  const auto* value = static_cast<const std::atomic<uint32_t>*>(word);
  if (value->load(std::memory_order_acquire) != expected || timeout_us <= 0) return;
  const long sleep_us = timeout_us < kFallbackSleepUs ? timeout_us : kFallbackSleepUs;
  timespec pause{0, sleep_us * 1000};
  nanosleep(&pause, nullptr);
}

// ---- sockets -------------------------------------------------------------------------------------------------------

static int finish_socket(int fd, bool nonblocking) {
  if (fd < 0) return fd;
  bool ok = fcntl(fd, F_SETFD, FD_CLOEXEC) == 0;
  // Set either way: BSD sockets accepted from a non-blocking listener inherit O_NONBLOCK, Linux ones do not.
  const int flags = fcntl(fd, F_GETFL);
  ok = ok && flags >= 0 && fcntl(fd, F_SETFL, nonblocking ? flags | O_NONBLOCK : flags & ~O_NONBLOCK) == 0;
#ifdef SO_NOSIGPIPE
  int one = 1;
  ok = ok && setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof(one)) == 0;
#endif
  if (!ok) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

int open_socket(int family, int type, int protocol, bool nonblocking) {
  return finish_socket(socket(family, type, protocol), nonblocking);
}

int accept_socket(int listening_fd, bool nonblocking) {
  return finish_socket(accept(listening_fd, nullptr, nullptr), nonblocking);
}

int send_flags() {
#ifdef MSG_NOSIGNAL
  return MSG_NOSIGNAL;  // POSIX.1-2008
#else
  return 0;  // the socket has SO_NOSIGPIPE (finish_socket)
#endif
}

bool is_listening_socket(int fd) {
  int type = 0;
  socklen_t type_length = sizeof(type);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_length) != 0 || type != SOCK_STREAM) return false;
  sockaddr_storage peer{};
  socklen_t peer_length = sizeof(peer);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) == 0 || errno != ENOTCONN) return false;
  sockaddr_storage self{};  // bound to a port: listen() would bind an unbound socket to any port
  socklen_t self_length = sizeof(self);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &self_length) != 0) return false;
  const bool has_port = (self.ss_family == AF_INET && reinterpret_cast<sockaddr_in*>(&self)->sin_port != 0) ||
                        (self.ss_family == AF_INET6 && reinterpret_cast<sockaddr_in6*>(&self)->sin6_port != 0);
  if (!has_port) return false;
  // Listening already: listen() only sets the backlog again. A bound socket that did not listen yet starts now.
  return listen(fd, SOMAXCONN) == 0;
}

// ---- identity ------------------------------------------------------------------------------------------------------

std::string host_kernel_id() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  char id[300];
  std::snprintf(id, sizeof(id), "hostid:%lx/%s", static_cast<unsigned long>(gethostid()), name);
  return id;
}

// ---- shared-memory segments ------------------------------------------------------------------------------------

int shm_reserve(int fd, size_t bytes, bool check_space) {
  // Where the segment's file system tells its free space (Linux tmpfs does), a segment that cannot fit fails
  // now: ftruncate alone would succeed and the first touch of a missing page raise SIGBUS.
  struct statvfs space {};
  if (check_space && fstatvfs(fd, &space) == 0 && space.f_frsize > 0 && space.f_blocks > 0 &&
      static_cast<unsigned long long>(space.f_bavail) * space.f_frsize < bytes) {
    return ENOSPC;
  }
  return ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? 0 : errno;
}

void* shm_map(int fd, size_t bytes) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int saved = errno;
  close(fd);
  if (base == MAP_FAILED) {
    errno = saved;
    return nullptr;
  }
  const long page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
  const auto* bytes_at = static_cast<const volatile uint8_t*>(base);
  for (size_t at = 0; at < bytes; at += static_cast<size_t>(page)) (void)bytes_at[at];  // fault pages in now
  return base;
}

static std::string registry_directory() {
  static const std::string directory = [] {
    char path[64];
    std::snprintf(path, sizeof(path), "/tmp/tbcoll-shm-%u", static_cast<unsigned>(getuid()));
    mkdir(path, 0700);
    // Ours alone, or not used: names others could add would make us unlink segments of their choice.
    struct stat info {};
    if (lstat(path, &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != getuid() ||
        (info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      return std::string();
    }
    return std::string(path);
  }();
  return directory;
}

void registry_add(const std::string& name) {
  const std::string directory = registry_directory();
  if (directory.empty() || name.empty()) return;
  int fd = open((directory + "/" + name.substr(name[0] == '/' ? 1 : 0)).c_str(),
                O_CREAT | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd >= 0) close(fd);
}

void registry_remove(const std::string& name) {
  const std::string directory = registry_directory();
  if (directory.empty() || name.empty()) return;
  unlink((directory + "/" + name.substr(name[0] == '/' ? 1 : 0)).c_str());
}

std::vector<std::string> registry_list() {
  const std::string directory = registry_directory();
  return directory.empty() ? std::vector<std::string>() : segment_names_in(directory);
}

std::vector<std::string> segment_names_in(const std::string& directory) {
  std::vector<std::string> names;
  DIR* dir = opendir(directory.c_str());
  if (dir == nullptr) return names;
  while (dirent* entry = readdir(dir)) {
    int owner = 0;
    if (shm_name_owner(entry->d_name, &owner)) names.push_back(std::string("/") + entry->d_name);
  }
  closedir(dir);
  return names;
}

// ---- the launcher's guard ------------------------------------------------------------------------------------------

// The launcher holds the write end; a guard process per rank holds the read end and sees EOF when the launcher
// is gone, however it died.
static int guard_pipe[2] = {-1, -1};

bool prepare_parent_death_guard() {
  if (guard_pipe[0] >= 0) return true;
  if (pipe(guard_pipe) != 0) return false;
  fcntl(guard_pipe[0], F_SETFD, FD_CLOEXEC);
  fcntl(guard_pipe[1], F_SETFD, FD_CLOEXEC);
  return true;
}

void arm_parent_death_guard() {
  if (guard_pipe[0] < 0) return;
  const pid_t rank = getpid();
  const pid_t guard = fork();
  if (guard != 0) return;  // the rank (or fork failed: no guard); the pipe's ends close at exec
  // The guard: it holds nothing of the rank's (its output pipes included, so the launcher sees them close).
  const long open_max = sysconf(_SC_OPEN_MAX);
  for (int fd = 0; fd < (open_max > 0 && open_max < 65536 ? open_max : 65536); ++fd) {
    if (fd != guard_pipe[0]) close(fd);
  }
  for (;;) {
    if (getppid() != rank) _exit(0);  // the rank exited: nothing to guard
    pollfd launcher{guard_pipe[0], POLLIN, 0};
    if (poll(&launcher, 1, 500) > 0) {
      char byte;
      if (read(guard_pipe[0], &byte, 1) > 0) continue;  // nobody writes; never mind
      if (getppid() == rank) kill(-rank, SIGKILL);  // the rank's group, this guard included
      _exit(0);
    }
  }
}

std::vector<std::string> names_of_environment(char** entries) {
  std::vector<std::string> names;
  for (char** entry = entries; entry != nullptr && *entry != nullptr; ++entry) {
    const char* equals = std::strchr(*entry, '=');
    names.emplace_back(*entry, equals != nullptr ? static_cast<size_t>(equals - *entry) : std::strlen(*entry));
  }
  return names;
}

}  // namespace generic

bool random_bytes(void* buf, size_t bytes) {
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  auto* at = static_cast<uint8_t*>(buf);
  while (bytes > 0) {
    const ssize_t got = read(fd, at, bytes);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int saved = got == 0 ? EIO : errno;
      close(fd);
      errno = saved;
      return false;
    }
    at += got;
    bytes -= static_cast<size_t>(got);
  }
  close(fd);
  return true;
}

}  // namespace tbcoll::platform
