// Who else shares this machine: the running kernel and this process's pid namespace.
#pragma once

#include <sys/stat.h>

#include <fstream>
#include <string>

namespace tbcoll {

/// The running kernel's boot id: processes that see the same one share the machine's CPUs and memory, whatever
/// their host names (containers) say. "" when unreadable.
inline std::string kernel_id() {
  std::string boot_id;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot_id);
  return boot_id;
}

/// Inode of this process's pid namespace (0 when unreadable): a pid means a process only within it.
inline unsigned long pid_namespace() {
  struct stat ns {};
  return stat("/proc/self/ns/pid", &ns) == 0 ? static_cast<unsigned long>(ns.st_ino) : 0;
}

}  // namespace tbcoll
