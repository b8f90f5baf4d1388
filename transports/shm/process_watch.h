// Whether a peer process has exited: platform::ProcessWatch (a pidfd on Linux, kqueue on macOS, kill() elsewhere).
// A pid of this process (ranks that are threads) never counts as exited.
#pragma once

#include "platform/platform.h"

namespace tbcoll::shm {

using platform::ProcessWatch;

}  // namespace tbcoll::shm
