// The transport's shared-memory segments that given processes own (names as segment_name() makes them, listed
// by the platform: /dev/shm or the registry), for the tests that check nothing is left behind.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <string>
#include <vector>

#include "transports/shm/stale_segments.h"

namespace tbcoll::test {

inline std::vector<std::string> segments_of(const std::vector<pid_t>& pids) {
  std::vector<std::string> found;
  for (const std::string& name : platform::shm_list()) {
    int owner = 0;
    if (shm::segment_owner(name, &owner) && std::count(pids.begin(), pids.end(), owner) > 0) found.push_back(name);
  }
  return found;
}

}  // namespace tbcoll::test
