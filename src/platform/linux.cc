// The Linux flavour: futex, pidfd, process_vm_readv, affinity, PR_SET_PDEATHSIG, /proc and /dev/shm.
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <fstream>
#include <string>

#include "platform/generic.h"

extern char** environ;  // POSIX: declared by the program, not by a header

namespace tbcoll::platform {

const char* flavour() { return "linux"; }

size_t last_level_cache_bytes() {
#if defined(_SC_LEVEL3_CACHE_SIZE)  // glibc
  for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    const long bytes = sysconf(name);
    if (bytes > 0) return static_cast<size_t>(bytes);
  }
#endif
  // The highest level sysfs lists for CPU 0 (index<i>/level, index<i>/size as "32768K").
  int best_level = 0;
  size_t best_bytes = 0;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level"), size_file(dir + "size");
    int level = 0;
    size_t kib = 0;
    if (!(level_file >> level) || !(size_file >> kib)) continue;
    if (level > best_level && kib > 0) {
      best_level = level;
      best_bytes = kib << 10;
    }
  }
  return best_bytes;
}

std::chrono::steady_clock::time_point coarse_now() {
  // The same clock as steady_clock (CLOCK_MONOTONIC), up to one tick behind, read without a time-stamp counter.
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::steady_clock::time_point(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
}

void wait_on_address(const void* word, uint32_t expected, long timeout_us) {
  timespec timeout{timeout_us / 1000000, (timeout_us % 1000000) * 1000};
  syscall(SYS_futex, word, FUTEX_WAIT, expected, &timeout, nullptr, 0);
}

void wake_address(const void* word) { syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

bool wait_on_address_wakes() { return true; }

int open_process_watch(int pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));  // -1 before Linux 5.3: kill() then
#else
  (void)pid;
  return -1;
#endif
}

bool watched_process_exited(int fd) {
  pollfd pfd{fd, POLLIN, 0};
  return poll(&pfd, 1, 0) > 0;
}

long read_process_memory(int pid, void* local, uint64_t remote, size_t bytes) {
  iovec local_iov{local, bytes};
  iovec remote_iov{reinterpret_cast<void*>(remote), bytes};
  return static_cast<long>(process_vm_readv(pid, &local_iov, 1, &remote_iov, 1, 0));
}

bool reads_process_memory() {
  // ptrace rules permitting (shm probes that per peer at set-up); ENOSYS where the kernel (or qemu-user) lacks it.
  static const bool present = [] {
    uint64_t word = 1, copy = 0;
    const uint64_t address = reinterpret_cast<uint64_t>(&word);
    return read_process_memory(static_cast<int>(getpid()), &copy, address, sizeof(word)) >= 0 || errno != ENOSYS;
  }();
  return present;
}

int open_socket(int family, int type, int protocol, bool nonblocking) {
  return socket(family, type | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), protocol);
}

int accept_socket(int listening_fd, bool nonblocking) {
  return accept4(listening_fd, nullptr, nullptr, SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0));
}

int send_flags() { return MSG_NOSIGNAL; }
bool dontwait_covers_sends() { return true; }

bool is_listening_socket(int fd) {
  int listening = 0, type = 0;
  socklen_t length = sizeof(listening), type_length = sizeof(type);
  return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_length) == 0 && type == SOCK_STREAM &&
         getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) == 0 && listening != 0;
}

std::string kernel_id() {
  std::string boot_id;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot_id);
  return boot_id;
}

// Inode of this process's pid namespace (0 when unreadable): a pid means a process only within it.
static unsigned long pid_namespace() {
  struct stat ns {};
  return stat("/proc/self/ns/pid", &ns) == 0 ? static_cast<unsigned long>(ns.st_ino) : 0;
}

std::string network_domain() {
  struct stat ns {};
  return stat("/proc/self/ns/net", &ns) == 0 ? "netns:" + std::to_string(static_cast<unsigned long>(ns.st_ino)) : "";
}

uint32_t pid_namespace_tag() {
  // Namespace inodes are handed out in sequence: their low 24 bits tell apart all but the 16-millionth next.
  static const uint32_t tag = [] {
    const unsigned long ns = pid_namespace();
    return ns == 0 ? 0u : (static_cast<uint32_t>(ns & 0xffffffu) == 0 ? 1u : static_cast<uint32_t>(ns & 0xffffffu));
  }();
  return tag;
}

std::string shm_domain() {
  // Containers of one pod can share the kernel and /dev/shm while their pids mean different processes; others
  // share the pids but mount a /dev/shm of their own.
  const std::string kernel = kernel_id();
  const unsigned long ns = pid_namespace();
  struct stat shm {};
  if (kernel.empty() || ns == 0 || stat("/dev/shm", &shm) != 0) return "";
  char domain[160];
  std::snprintf(domain, sizeof(domain), "%s/pidns:%lu/shm:%llx:%llx", kernel.c_str(), ns,
                static_cast<unsigned long long>(shm.st_dev), static_cast<unsigned long long>(shm.st_ino));
  return domain;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE && cpu < kMaxCpus; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

int runnable_threads() {
  const int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char text[128];
  const ssize_t got = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (got <= 0) return -1;
  text[got] = '\0';
  double one = 0, five = 0, fifteen = 0;
  int running = 0, total = 0;
  if (std::sscanf(text, "%lf %lf %lf %d/%d", &one, &five, &fifteen, &running, &total) != 5) return -1;
  return running;
}

long involuntary_switches() {
  rusage usage{};
  return getrusage(RUSAGE_THREAD, &usage) == 0 ? usage.ru_nivcsw : -1;
}

bool bind_to_cpu(int cpu) {
  if (cpu < 0 || cpu >= CPU_SETSIZE) return false;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return sched_setaffinity(0, sizeof(one), &one) == 0;
}

bool unbind_from_cpus() {
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (online <= 0) return false;
  cpu_set_t all;
  CPU_ZERO(&all);
  for (long cpu = 0; cpu < online && cpu < CPU_SETSIZE; ++cpu) CPU_SET(static_cast<int>(cpu), &all);
  return sched_setaffinity(0, sizeof(all), &all) == 0;
}

void prefer_fast_cores() {}

bool uses_shm_registry() { return false; }

int shm_reserve(int fd, size_t bytes) {
  // posix_fallocate, not just ftruncate: a tmpfs that is too small fails here, not with SIGBUS later.
  return ftruncate(fd, static_cast<off_t>(bytes)) != 0 ? errno : posix_fallocate(fd, 0, static_cast<off_t>(bytes));
}

void* shm_map(int fd, size_t bytes) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int saved = errno;
  close(fd);
  errno = saved;
  return base == MAP_FAILED ? nullptr : base;
}

std::vector<std::string> shm_list() { return generic::segment_names_in("/dev/shm"); }

bool prepare_parent_death_guard() { return true; }

void arm_parent_death_guard() { prctl(PR_SET_PDEATHSIG, SIGKILL); }

std::vector<std::string> verbs_libraries() { return {"libibverbs.so.1"}; }

bool macos_version(int*, int*) { return false; }

std::vector<std::string> crypto_libraries() {
  return {"libcrypto.so.3", "libcrypto.so"};
}

std::vector<std::string> environment_names() { return generic::names_of_environment(::environ); }

}  // namespace tbcoll::platform
