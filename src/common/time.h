// Deadlines: every blocking wait in tbcoll takes one.
#pragma once

#include <chrono>

#include "tbcoll/store.hpp"

namespace tbcoll {

inline Deadline deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

/// Milliseconds left until deadline (0 when passed), for poll() timeouts.
inline int remaining_ms(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : (left > 1000000 ? 1000000 : static_cast<int>(left));
}

}  // namespace tbcoll
