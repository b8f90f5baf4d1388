// The macOS flavour (macOS 14+, Apple clang). Only documented Apple APIs; it cannot be compiled on the Linux CI,
// which builds the posix flavour instead: every generic path used here is tested there. What only this file
// does, and so is untested by CI, is listed in the README ("macOS").
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <pthread/qos.h>
#include <sys/event.h>
#include <sys/sysctl.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <crt_externs.h>
#include <uuid/uuid.h>

#include <cstdio>
#include <string>

#include "platform/generic.h"

#if __has_include(<os/os_sync_wait_on_address.h>) && __has_include(<os/clock.h>)  // the macOS 14.4 SDK and later
#include <os/clock.h>
#include <os/os_sync_wait_on_address.h>
#define TBCOLL_HAVE_OS_SYNC_WAIT 1
#else
#define TBCOLL_HAVE_OS_SYNC_WAIT 0
#endif

namespace tbcoll::platform {

const char* flavour() { return "darwin"; }

size_t last_level_cache_bytes() {
  for (const char* name : {"hw.l3cachesize", "hw.l2cachesize"}) {
    int64_t bytes = 0;
    size_t size = sizeof(bytes);
    if (sysctlbyname(name, &bytes, &size, nullptr, 0) == 0 && bytes > 0) return static_cast<size_t>(bytes);
  }
  return 0;
}

// steady_clock is mach_absolute_time on macOS, a user-space counter read: no cheaper clock of the same kind.
std::chrono::steady_clock::time_point coarse_now() { return generic::precise_now(); }

void wait_on_address(const void* word, uint32_t expected, long timeout_us) {
#if TBCOLL_HAVE_OS_SYNC_WAIT
  if (__builtin_available(macOS 14.4, *)) {
    if (timeout_us <= 0) return;
    os_sync_wait_on_address_with_timeout(const_cast<void*>(word), expected, sizeof(uint32_t),
                                         OS_SYNC_WAIT_ON_ADDRESS_SHARED, OS_CLOCK_MACH_ABSOLUTE_TIME,
                                         static_cast<uint64_t>(timeout_us) * 1000);
    return;
  }
#endif
  generic::sleep_while_equal(word, expected, timeout_us);
}

void wake_address(const void* word) {
#if TBCOLL_HAVE_OS_SYNC_WAIT
  if (__builtin_available(macOS 14.4, *)) {
    os_sync_wake_by_address_all(const_cast<void*>(word), sizeof(uint32_t), OS_SYNC_WAKE_BY_ADDRESS_SHARED);
  }
#else
  (void)word;
#endif
}

bool wait_on_address_wakes() {
#if TBCOLL_HAVE_OS_SYNC_WAIT
  if (__builtin_available(macOS 14.4, *)) return true;
#endif
  return false;
}

int open_process_watch(int pid) {
  const int queue = kqueue();
  if (queue < 0) return -1;
  struct kevent change;
  EV_SET(&change, static_cast<uintptr_t>(pid), EVFILT_PROC, EV_ADD, NOTE_EXIT, 0, nullptr);
  if (kevent(queue, &change, 1, nullptr, 0, nullptr) != 0) {  // ESRCH: gone already; kill() tells then
    close(queue);
    return -1;
  }
  fcntl(queue, F_SETFD, FD_CLOEXEC);
  return queue;
}

bool watched_process_exited(int fd) {
  struct kevent event;
  const timespec no_wait{0, 0};
  return kevent(fd, nullptr, 0, &event, 1, &no_wait) > 0;
}

long read_process_memory(int, void*, uint64_t, size_t) {
  errno = ENOSYS;  // task_for_pid needs entitlements no library should ask for
  return -1;
}

bool reads_process_memory() { return false; }

int open_socket(int family, int type, int protocol, bool nonblocking) {
  return generic::open_socket(family, type, protocol, nonblocking);  // with SO_NOSIGPIPE
}
int accept_socket(int listening_fd, bool nonblocking) { return generic::accept_socket(listening_fd, nonblocking); }
int send_flags() { return 0; }  // SO_NOSIGPIPE is set on every socket
bool dontwait_covers_sends() { return false; }
long involuntary_switches() { return -1; }  // no per-thread count through getrusage
bool is_listening_socket(int fd) { return generic::is_listening_socket(fd); }  // no SO_ACCEPTCONN for getsockopt

std::string kernel_id() {
  uuid_t host;
  const timespec wait{2, 0};
  if (gethostuuid(host, &wait) != 0) return "";
  char host_text[40] = {};
  uuid_unparse_lower(host, host_text);
  char boot[64] = {};
  size_t length = sizeof(boot) - 1;
  if (sysctlbyname("kern.bootsessionuuid", boot, &length, nullptr, 0) != 0) return "";
  return std::string(host_text) + "/boot:" + boot;
}

uint32_t pid_namespace_tag() { return 1; }     // one pid space per machine
std::string network_domain() { return ""; }  // one network stack per machine, as far as we know
std::string shm_domain() { return kernel_id(); }  // every process of the machine can open a user's segments

std::vector<int> allowed_cpus() { return {}; }  // no affinity on macOS
int runnable_threads() { return -1; }  // load averages only (vm.loadavg): too slow to follow a wait
bool bind_to_cpu(int) { return false; }
bool unbind_from_cpus() { return false; }
void prefer_fast_cores() { pthread_set_qos_class_self_np(QOS_CLASS_USER_INTERACTIVE, 0); }

bool uses_shm_registry() { return true; }  // macOS cannot list POSIX shm names
int shm_reserve(int fd, size_t bytes) { return generic::shm_reserve(fd, bytes, /*check_space=*/false); }
void* shm_map(int fd, size_t bytes) { return generic::shm_map(fd, bytes); }
std::vector<std::string> shm_list() { return generic::registry_list(); }

bool prepare_parent_death_guard() { return generic::prepare_parent_death_guard(); }
void arm_parent_death_guard() { generic::arm_parent_death_guard(); }

std::vector<std::string> verbs_libraries() { return {"/usr/lib/librdma.dylib", "librdma.dylib"}; }

bool macos_version(int* major, int* minor) {
  char text[32] = {};
  size_t size = sizeof(text) - 1;
  if (sysctlbyname("kern.osproductversion", text, &size, nullptr, 0) != 0) return false;
  *major = *minor = 0;
  return std::sscanf(text, "%d.%d", major, minor) >= 1;
}

std::vector<std::string> crypto_libraries() {
  return {"libcrypto.3.dylib", "/opt/homebrew/opt/openssl@3/lib/libcrypto.3.dylib",
          "/usr/local/opt/openssl@3/lib/libcrypto.3.dylib"};
}

std::vector<std::string> environment_names() { return generic::names_of_environment(*_NSGetEnviron()); }

}  // namespace tbcoll::platform
