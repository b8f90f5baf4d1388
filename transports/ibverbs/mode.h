// The queue pair types the ibverbs transport and the RDMA diagnostics use: UC (unreliable connected, all Apple's
// Thunderbolt stack offers) and RC (reliable connected, RoCE and InfiniBand).
#pragma once

#include <cstdint>

namespace tbcoll::ibverbs {

enum class Mode : uint8_t { kUc = 1, kRc = 2 };

/// "uc" or "rc".
inline const char* mode_name(Mode mode) { return mode == Mode::kRc ? "rc" : "uc"; }

}  // namespace tbcoll::ibverbs
