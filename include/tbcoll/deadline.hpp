// Time in tbcoll's API: every blocking call takes a deadline on the steady clock.
#pragma once

#include <chrono>

namespace tbcoll {

using Clock = std::chrono::steady_clock;
/// The time by which a blocking call gives up (TimeoutError); Deadline::max() means never.
using Deadline = Clock::time_point;

}  // namespace tbcoll
