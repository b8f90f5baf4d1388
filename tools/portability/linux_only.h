// Poisons the Linux-only names that must stay in src/platform (tools/check-portability.sh force-includes this
// header into every other source file). The system headers that legitimately mention them come first, so only our
// own code can trip over a poisoned name: a use of one, or an include of a header declaring one (<sys/prctl.h>,
// <sys/syscall.h>, <linux/futex.h>) is a compile error.
#pragma GCC system_header
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#pragma GCC poison accept4 pipe2 dup3 process_vm_readv process_vm_writev
#pragma GCC poison sched_getaffinity sched_setaffinity pthread_setaffinity_np pthread_getaffinity_np sched_getcpu
#pragma GCC poison cpu_set_t CPU_SET CPU_ZERO CPU_ISSET CPU_COUNT CPU_SETSIZE
#pragma GCC poison posix_fallocate fallocate MAP_POPULATE memfd_create
#pragma GCC poison SOCK_CLOEXEC SOCK_NONBLOCK SO_ACCEPTCONN
#pragma GCC poison CLOCK_MONOTONIC_COARSE CLOCK_BOOTTIME
#pragma GCC poison syscall SYS_futex SYS_pidfd_open pidfd_open FUTEX_WAIT FUTEX_WAKE
#pragma GCC poison prctl PR_SET_PDEATHSIG
