// Removal of shm segments whose owner died before unlinking them (killed during set-up: a segment is unlinked
// only once every peer mapped it). Header-only, so tbcoll-run (which has the platform layer but not the library)
// can sweep after a job it stopped. Names are platform::shm_name()'s, which carry the owner's pid; the platform
// lists them (/dev/shm on Linux, a registry where the system cannot list segments).
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "platform/platform.h"

namespace tbcoll::shm {

/// The owner of a segment of this pid namespace from its name ('/' optional); false for other names.
inline bool segment_owner(const std::string& name, int* pid) { return platform::shm_name_owner(name, pid); }

/// Whether the named segment is a file of this process's effective user.
inline bool owned_by_us(const std::string& name) {
  const int fd = platform::shm_open_existing(name);
  if (fd < 0) return false;
  struct stat info {};
  const bool ours = fstat(fd, &info) == 0 && info.st_uid == geteuid();
  close(fd);
  return ours;
}

/// Removes the segments of this pid namespace whose owner process no longer exists; returns how many. Elsewhere
/// (another container sharing /dev/shm) the pid means another process, and a live rank's segment would go;
/// without our pid namespace (no /proc) no name is ours and nothing is swept.
/// Only this user's segments go: a name can be made by anyone, so another user's file (or one we cannot open, hence
/// cannot know the owner of) stays whatever pid its name carries.
inline int remove_stale_segments() {
  int removed = 0;
  for (const std::string& name : platform::shm_list()) {
    int pid = 0;
    if (!segment_owner(name, &pid) || platform::process_exists(pid) || !owned_by_us(name)) continue;
    if (platform::shm_remove(name) == 0) ++removed;
  }
  return removed;
}

}  // namespace tbcoll::shm
