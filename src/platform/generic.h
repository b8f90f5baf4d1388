// POSIX implementations the platform flavours share (platform.h says what each function does), and the hooks
// every flavour defines for them. Include from src/platform only.
#pragma once

#include <string>
#include <vector>

#include "platform/platform.h"

namespace tbcoll::platform {

// ---- defined by each flavour, used by generic.cc -------------------------------------------------------------------

/// A descriptor that turns readable (linux: pidfd) or reports an event (darwin: kqueue) when pid exits; -1 where
/// the flavour has none (then ProcessWatch uses kill()).
int open_process_watch(int pid);
/// Whether the process watched by fd (from open_process_watch) has exited.
bool watched_process_exited(int fd);
/// The tag of this pid namespace in segment names (24 bits); 0 when unknown (then no name is judged ours).
uint32_t pid_namespace_tag();
/// Whether segments are listed in the registry (no way to list them from the system).
bool uses_shm_registry();

namespace generic {

std::chrono::steady_clock::time_point precise_now();
/// The bounded-sleep fallback of wait_on_address.
void sleep_while_equal(const void* word, uint32_t expected, long timeout_us);

int open_socket(int family, int type, int protocol, bool nonblocking);
int accept_socket(int listening_fd, bool nonblocking);
int send_flags();
bool is_listening_socket(int fd);

/// gethostid() and the host name: the best POSIX offers for "the same machine".
std::string host_kernel_id();

/// ftruncate; with check_space, first ENOSPC where fstatvfs says the segment's file system has less room free.
int shm_reserve(int fd, size_t bytes, bool check_space);
void* shm_map(int fd, size_t bytes);
/// The registry: one empty file per live segment in /tmp/tbcoll-shm-<uid> (a directory only that user can write).
void registry_add(const std::string& name);
void registry_remove(const std::string& name);
std::vector<std::string> registry_list();
/// The names made by shm_name() among the entries of a directory, with the leading '/'.
std::vector<std::string> segment_names_in(const std::string& directory);

bool prepare_parent_death_guard();
void arm_parent_death_guard();

/// The names of a NULL-terminated environ-style array ("NAME=value" entries).
std::vector<std::string> names_of_environment(char** entries);

}  // namespace generic
}  // namespace tbcoll::platform
