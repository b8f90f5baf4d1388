// The transport's shared-memory segments in /dev/shm that given processes own (names as segment_name() makes
// them), for the tests that check nothing is left behind.
#pragma once

#include <dirent.h>
#include <sys/types.h>

#include <algorithm>
#include <string>
#include <vector>

#include "transports/shm/stale_segments.h"

namespace tbcoll::test {

inline std::vector<std::string> segments_of(const std::vector<pid_t>& pids) {
  std::vector<std::string> found;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return found;
  while (dirent* entry = readdir(dir)) {
    unsigned long ns = 0;
    int owner = 0;
    if (shm::segment_owner(entry->d_name, &ns, &owner) && std::count(pids.begin(), pids.end(), owner) > 0) {
      found.push_back(entry->d_name);
    }
  }
  closedir(dir);
  return found;
}

}  // namespace tbcoll::test
