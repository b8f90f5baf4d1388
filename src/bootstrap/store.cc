// What every Store has unless it knows better: the cancellable get, as slices of the plain one.
#include "tbcoll/store.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "common/time.h"
#include "tbcoll/error.hpp"

namespace tbcoll {

std::vector<uint8_t> Store::get(const std::string& key, Deadline deadline, const std::atomic<bool>* cancelled) {
  if (cancelled == nullptr) return get(key, deadline);
  for (;;) {  // short gets, looking at the flag between them
    check_cancelled(cancelled, fmt::format("[store] waiting for {:?}", key));
    const Deadline slice = std::min(deadline, Clock::now() + std::chrono::milliseconds(kCancelPollMs));
    try {
      return get(key, slice);
    } catch (const TimeoutError&) {
      if (Clock::now() >= deadline) throw;
    }
  }
}

}  // namespace tbcoll
