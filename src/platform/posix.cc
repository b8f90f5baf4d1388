// The generic flavour: POSIX.1-2008 only. No wait on an address (bounded sleeps), no process watch but kill(),
// no cross-memory reads, no CPU affinity; segments are found through the registry. CI builds it on Linux
// (TBCOLL_PLATFORM=posix) so the paths macOS takes stay tested.
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "platform/generic.h"

extern char** environ;  // POSIX: declared by the program, not by a header

namespace tbcoll::platform {

const char* flavour() { return "posix"; }

size_t last_level_cache_bytes() { return 0; }

std::chrono::steady_clock::time_point coarse_now() { return generic::precise_now(); }

void wait_on_address(const void* word, uint32_t expected, long timeout_us) {
  generic::sleep_while_equal(word, expected, timeout_us);
}
void wake_address(const void*) {}
bool wait_on_address_wakes() { return false; }

int open_process_watch(int) { return -1; }
bool watched_process_exited(int) { return false; }

long read_process_memory(int, void*, uint64_t, size_t) {
  errno = ENOSYS;
  return -1;
}

bool reads_process_memory() { return false; }

int open_socket(int family, int type, int protocol, bool nonblocking) {
  return generic::open_socket(family, type, protocol, nonblocking);
}
int accept_socket(int listening_fd, bool nonblocking) { return generic::accept_socket(listening_fd, nonblocking); }
int send_flags() { return generic::send_flags(); }
bool dontwait_covers_sends() { return false; }  // not a POSIX promise
long involuntary_switches() { return -1; }  // RUSAGE_THREAD is not POSIX
bool is_listening_socket(int fd) { return generic::is_listening_socket(fd); }

std::string kernel_id() { return generic::host_kernel_id(); }
uint32_t pid_namespace_tag() { return 1; }  // one pid namespace per machine, as far as POSIX knows

std::string network_domain() { return ""; }  // one network stack per machine, as far as we know
std::string shm_domain() {
  // Processes that see the same device behind a fresh segment share the segments' file system (on Linux, a
  // container with a /dev/shm of its own sees another one).
  static const std::string domain = [] {
    const std::string kernel = kernel_id();
    const std::string probe = shm_name(static_cast<int>(getpid()), 0xfffffffffffull);
    if (kernel.empty()) return std::string();
    const int fd = shm_create(probe);
    if (fd < 0) return std::string();
    struct stat info {};
    const bool known = fstat(fd, &info) == 0;
    close(fd);
    shm_remove(probe);
    return known ? kernel + "/shm:" + std::to_string(static_cast<unsigned long long>(info.st_dev)) : std::string();
  }();
  return domain;
}

std::vector<int> allowed_cpus() { return {}; }
int runnable_threads() { return -1; }
bool bind_to_cpu(int) { return false; }
bool unbind_from_cpus() { return false; }
void prefer_fast_cores() {}

bool uses_shm_registry() { return true; }
int shm_reserve(int fd, size_t bytes) { return generic::shm_reserve(fd, bytes, /*check_space=*/true); }
void* shm_map(int fd, size_t bytes) { return generic::shm_map(fd, bytes); }
std::vector<std::string> shm_list() { return generic::registry_list(); }

bool prepare_parent_death_guard() { return generic::prepare_parent_death_guard(); }
void arm_parent_death_guard() { generic::arm_parent_death_guard(); }

std::vector<std::string> verbs_libraries() { return {"libibverbs.so.1"}; }

bool macos_version(int*, int*) { return false; }

std::vector<std::string> crypto_libraries() {
  return {"libcrypto.so.3", "libcrypto.so"};
}

std::vector<std::string> environment_names() { return generic::names_of_environment(::environ); }

}  // namespace tbcoll::platform
