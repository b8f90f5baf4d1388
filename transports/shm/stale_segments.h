// Removal of shm segments whose owner died before unlinking them (killed during set-up: a segment is
// unlinked only once every peer mapped it). Header-only, so tbcoll-run can sweep after a job it stopped
// without linking the library. Names are segment_name()'s: /tbcoll-<pid namespace, hex>-<pid>-<id>-<rank>.
#pragma once

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/mman.h>

#include <cstdio>
#include <string>

#include "common/identity.h"

namespace tbcoll::shm {

/// Reads the owner of a segment from its name in /dev/shm (no leading '/'); false for other names.
inline bool segment_owner(const char* name, unsigned long* pid_namespace, int* pid) {
  return std::sscanf(name, "tbcoll-%lx-%d-", pid_namespace, pid) == 2 && *pid > 0;
}

/// Removes the segments in /dev/shm whose owner process no longer exists; returns how many. Only segments of
/// this pid namespace: elsewhere (another container sharing /dev/shm) the pid means another process, and a
/// live rank's segment would go. Without our pid namespace (no /proc) no pid can be judged: sweeps nothing.
inline int remove_stale_segments() {
  const unsigned long mine = pid_namespace();
  if (mine == 0) return 0;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  while (dirent* entry = readdir(dir)) {
    unsigned long ns = 0;
    int pid = 0;
    if (!segment_owner(entry->d_name, &ns, &pid) || ns != mine) continue;
    if (kill(pid, 0) != 0 && errno == ESRCH && shm_unlink((std::string("/") + entry->d_name).c_str()) == 0) {
      ++removed;
    }
  }
  closedir(dir);
  return removed;
}

}  // namespace tbcoll::shm
