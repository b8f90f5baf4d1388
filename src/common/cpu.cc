#include "common/cpu.h"

#include <sched.h>
#include <sys/sysinfo.h>

#include <fmt/format.h>

#include "common/env.h"
#include "tbcoll/error.hpp"

namespace tbcoll {

bool spin_should_yield(int local_ranks) {
  const long long forced = env::get_int("TBCOLL_SPIN_YIELD");
  if (forced == 0 || forced == 1) return forced == 1;
  if (forced != -1) throw InvalidArgument(fmt::format("[env] TBCOLL_SPIN_YIELD={} must be -1, 0 or 1", forced));
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return true;
  const bool pinned = CPU_COUNT(&allowed) == 1;
  return !pinned || local_ranks > get_nprocs();
}

}  // namespace tbcoll
