// The operating system, behind one interface: the only place in tbcoll for calls that exist on some systems only.
// CMake compiles one flavour (TBCOLL_PLATFORM=auto|linux|darwin|posix):
//
//   linux.cc   futex, pidfd, process_vm_readv, sched_setaffinity, PR_SET_PDEATHSIG, /proc identity, /dev/shm
//   darwin.cc  os_sync_wait_on_address (macOS 14.4+), kqueue EVFILT_PROC, QoS classes, gethostuuid and
//              kern.bootsessionuuid; no peer-memory reads, no CPU affinity
//   posix.cc   POSIX.1-2008 only: what a system we do not know gets, and what CI builds on Linux to keep the
//              non-Linux paths (short shm names, the segment registry, the launcher's guard process) honest
//
// with generic.cc, the POSIX implementations the flavours share. Every function may be called from any thread
// and none throws unless it says so. Object code of this directory goes into libtbcoll and into tbcoll-run, which
// does not link the library.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tbcoll::platform {

/// "linux", "darwin" or "posix": the flavour compiled in.
const char* flavour();

/// Bytes of a cache line, for keeping data that different cores write apart: 128 on Apple's M-series (and what
/// their prefetcher pairs up), 64 elsewhere.
#if defined(__APPLE__) && defined(__aarch64__)
constexpr size_t kCacheLineBytes = 128;
#else
constexpr size_t kCacheLineBytes = 64;
#endif

/// Bytes of the last-level cache (L3, else L2) as the system reports it; 0 where it does not.
size_t last_level_cache_bytes();

// ---- time ------------------------------------------------------------------------------------------------------

/// Now on std::chrono::steady_clock, read as cheaply as the system allows: up to one scheduler tick behind on
/// Linux (CLOCK_MONOTONIC_COARSE, no time-stamp counter read), the precise clock elsewhere. Deadlines are set on
/// every collective call, where a precise read costs a noticeable share of a 0.2 us all-reduce.
std::chrono::steady_clock::time_point coarse_now();

// ---- waiting on an address -----------------------------------------------------------------------------------------

/// Sleeps while the 32-bit word at `word` (in memory other processes may map) holds `expected`, at most
/// timeout_us; returns on a wake, a change, a timeout, a signal or spuriously: callers re-check and loop. Where the
/// system has no such wait (posix, macOS before 14.4) it is a bounded sleep of at most kFallbackSleepUs, and wakes
/// are no-ops: a missed wake costs that sleep, never a hang.
void wait_on_address(const void* word, uint32_t expected, long timeout_us);
/// Wakes every thread of any process waiting on `word`.
void wake_address(const void* word);
constexpr long kFallbackSleepUs = 50;
/// True when wake_address() really wakes (futex, os_sync_wait_on_address), false for the bounded-sleep fallback.
bool wait_on_address_wakes();

// ---- other processes -----------------------------------------------------------------------------------------------

/// Whether a process has exited, without being its parent: a pidfd on Linux (readable once the process exits,
/// even before it is reaped), kqueue EVFILT_PROC on macOS, kill(pid, 0) elsewhere (a zombie still counts as alive).
/// A pid of this process (ranks that are threads) never counts as exited. Movable, not copyable.
class ProcessWatch {
 public:
  explicit ProcessWatch(int pid);
  ProcessWatch(ProcessWatch&& other) noexcept;
  ProcessWatch& operator=(ProcessWatch&& other) noexcept;
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;
  ~ProcessWatch();

  bool exited() const;
  int pid() const { return pid_; }

 private:
  int pid_;
  int fd_ = -1;  ///< pidfd or kqueue; -1: kill() only
  mutable std::atomic<bool> exited_{false};
};

/// True when the process with this pid exists (in this pid namespace); a zombie exists.
bool process_exists(int pid);

/// Copies `bytes` from address `remote` of process `pid` to `local` (cross-memory attach): returns the bytes
/// read, or -1 with errno set (EPERM without ptrace permission; ENOSYS where the system has no such call).
long read_process_memory(int pid, void* local, uint64_t remote, size_t bytes);
/// False where read_process_memory always fails with ENOSYS (then shm has no cross-memory-attach fast path).
bool reads_process_memory();

// ---- sockets -------------------------------------------------------------------------------------------------------

/// socket(2) with close-on-exec set, and non-blocking if asked, atomically where the system allows; sockets
/// never raise SIGPIPE (SO_NOSIGPIPE where it exists, else pass send_flags() to send). -1 with errno on failure.
int open_socket(int family, int type, int protocol, bool nonblocking);
/// accept(2) giving a socket like open_socket's. -1 with errno (EAGAIN when nothing is pending).
int accept_socket(int listening_fd, bool nonblocking);
/// Flags for send/sendmsg on our sockets: MSG_NOSIGNAL where it exists, else 0 (the socket has SO_NOSIGPIPE).
int send_flags();
/// Whether MSG_DONTWAIT keeps every send and receive from blocking on a socket in blocking mode (Linux). XNU
/// honours it on receives only: a send there blocks on a full socket whatever the flag, so a socket that must
/// never block in send stays non-blocking.
bool dontwait_covers_sends();
/// True when fd is a stream socket that accepts connections. Where the system cannot tell (macOS has no
/// SO_ACCEPTCONN for getsockopt) a stream socket bound to a port and without a peer is put into the listening
/// state, which is what its caller wants anyway.
bool is_listening_socket(int fd);

// ---- machine identity ----------------------------------------------------------------------------------------------

/// The running kernel: processes that see the same non-empty id share one machine's CPUs and memory, whatever
/// their host names say. Linux: the boot id; macOS: gethostuuid and kern.bootsessionuuid; posix: gethostid and
/// the host name (cannot tell containers apart). "" when unknown.
std::string kernel_id();
/// Processes with equal non-empty domains can open each other's shm segments and judge each other's pids. Linux
/// adds the pid namespace and the /dev/shm file system to the kernel; posix the device of a probe segment.
/// "" when unknown (then processes never share memory).
std::string shm_domain();

/// The network stack this process sees: processes of one machine in different network namespaces ("hosts" of a
/// test, containers with their own network) count as different hosts for transport choice. Linux: "netns:<inode>";
/// "" elsewhere (one network stack per machine).
std::string network_domain();

// ---- network interfaces --------------------------------------------------------------------------------------------

/// One address of a network interface that is up (getifaddrs: Linux and macOS alike).
struct NetworkInterface {
  std::string name;     ///< "eth0", "en5", "bridge0", "lo0"
  std::string address;  ///< numeric, "10.0.0.2" or "fd00::2" (link-local IPv6 addresses are left out)
  bool ipv6 = false;
  bool loopback = false;
  int prefix = -1;  ///< the netmask's length in bits (24 for 255.255.255.0); -1 when the system gives none
};
/// Every IPv4 and IPv6 (not link-local) address of the interfaces that are up, in the system's order; empty on
/// failure.
std::vector<NetworkInterface> network_interfaces();

// ---- environment ---------------------------------------------------------------------------------------------------

/// The names of every variable in this process's environment (environ; on macOS _NSGetEnviron(), since a shared
/// library cannot link environ there).
std::vector<std::string> environment_names();

// ---- CPU placement -------------------------------------------------------------------------------------------------

/// Upper bound of the CPU numbers allowed_cpus() returns and bind_to_cpu() takes.
constexpr int kMaxCpus = 1024;
/// CPUs the calling thread may run on, ascending; empty where the system has no affinity (macOS, posix).
std::vector<int> allowed_cpus();
/// Pins the calling thread (and the processes it then starts) to one CPU; false where the system cannot.
bool bind_to_cpu(int cpu);
/// Lets the calling thread run on every online CPU again (undoes bind_to_cpu and an inherited pinning); false
/// where the system has no affinity.
bool unbind_from_cpus();
/// Threads runnable on the whole machine right now (running or waiting for a CPU), the caller included: the first
/// figure of /proc/loadavg's "R/T" on Linux (about 3 us: open, read, close); -1 where the system does not tell
/// at once (macOS and posix give load averages only). For a spinning wait to see whether others want the CPUs.
int runnable_threads();
/// Times the calling thread lost its CPU while it could run (involuntary context switches: preempted, or yielded
/// to another thread), since it started: getrusage(RUSAGE_THREAD) on Linux; -1 where the system does not count
/// per thread. Tells a spin's clock gap that was another thread's turn from one spent working.
long involuntary_switches();
/// Asks the scheduler to keep the calling thread, a spinning waiter, on fast cores (macOS QoS class
/// user-interactive keeps it on performance cores). No-op where there is nothing to ask.
void prefer_fast_cores();

// ---- shared-memory segments ------------------------------------------------------------------------------------

/// Longest segment name, leading '/' included: macOS refuses longer ones (PSHMNAMLEN).
constexpr size_t kMaxShmNameChars = 31;
/// A segment name for owner pid and a key (say a hash of communicator id and rank), at most kMaxShmNameChars:
/// "/tb<pid namespace tag>-<pid>-<key>", all hex. Names carry the owner so the sweep can find dead ones.
std::string shm_name(int owner_pid, uint64_t key);
/// The owner pid of a name made by shm_name() in this pid namespace ('/' optional); false for any other name.
bool shm_name_owner(const std::string& name, int* owner_pid);
/// Creates a new segment (O_EXCL, mode 0600, close-on-exec) and records its name where the sweep finds it (the
/// registry, where the system cannot list segments). fd, or -1 with errno.
int shm_create(const std::string& name);
/// Opens an existing segment read-write, close-on-exec. fd, or -1 with errno.
int shm_open_existing(const std::string& name);
/// Gives a new segment its size and the memory behind it: a file system too small fails here (errno value
/// returned; 0 on success), not with SIGBUS at the first touch.
int shm_reserve(int fd, size_t bytes);
/// Maps a segment read-write with every page faulted in (not in the middle of a timed collective); closes fd.
/// nullptr with errno on failure.
void* shm_map(int fd, size_t bytes);
/// Unlinks a segment name and forgets it in the registry. 0, or -1 with errno.
int shm_remove(const std::string& name);
/// Names of this pid namespace's segments (made by shm_name, with the leading '/'): the listing of /dev/shm on
/// Linux, the registry elsewhere.
std::vector<std::string> shm_list();

// ---- launching ranks -------------------------------------------------------------------------------------------

/// Once in the launcher, before it starts ranks: prepares the guard below (posix: a pipe whose write end only the
/// launcher holds, close-on-exec). False with errno on failure.
bool prepare_parent_death_guard();
/// In a rank between fork() and exec(), after setpgid(0, 0): the rank's process group is killed (SIGKILL) when
/// the launcher dies, even killed outright. Linux: PR_SET_PDEATHSIG; elsewhere a small guard process forked here
/// waits for the launcher's pipe to close and then kills the group (it leaves when the rank exits). Only
/// async-signal-safe calls.
void arm_parent_death_guard();

// ---- security ------------------------------------------------------------------------------------------------------

/// Fills buf with bytes from the system's random source (/dev/urandom, on Linux and macOS alike); false (errno
/// set) if it cannot. For nonces and secrets.
bool random_bytes(void* buf, size_t bytes);
/// The OpenSSL 3 libcrypto to dlopen, best first: "libcrypto.so.3" (Debian's libssl3); Homebrew's openssl@3 on
/// macOS (never /usr/lib/libcrypto.dylib, which macOS refuses to let programs load).
std::vector<std::string> crypto_libraries();

// ---- RDMA ----------------------------------------------------------------------------------------------------------

/// The verbs libraries to dlopen, the first that loads wins: "libibverbs.so.1" (rdma-core); on macOS 26.2+ the
/// system's "/usr/lib/librdma.dylib" first, then "librdma.dylib" by name.
std::vector<std::string> verbs_libraries();
/// The macOS version this process runs on (26.3: *major 26, *minor 3); false on other systems.
bool macos_version(int* major, int* minor);

}  // namespace tbcoll::platform
