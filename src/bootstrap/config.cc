// Config::from_env: TBCOLL_* first, then the launcher variables of OpenMPI, PMI and Slurm.
#include <cstdlib>

#include <fmt/format.h>

#include "common/env.h"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll {
namespace {

int int_from(const char* name, const char* value) {
  char* end = nullptr;
  long parsed = std::strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || parsed < 0 || parsed > (1 << 24)) {
    throw InvalidArgument(fmt::format("[bootstrap] {}={:?} is not a valid rank or size", name, value));
  }
  return static_cast<int>(parsed);
}

// First variable of the list that is set.
int first_set(std::initializer_list<const char*> names, int fallback) {
  for (const char* name : names) {
    if (const char* value = std::getenv(name)) return int_from(name, value);
  }
  return fallback;
}

}  // namespace

Config Config::from_env() {
  Config config;
  config.rank = first_set({"TBCOLL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, -1);
  config.world_size = first_set({"TBCOLL_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, -1);
  if (config.rank < 0 && config.world_size < 0) {
    config.rank = 0;  // not launched by anything: a single-rank job
    config.world_size = 1;
  }
  config.root = env::get("TBCOLL_ROOT");
  config.token = env::get("TBCOLL_TOKEN");
  config.timeout_s = env::get_double("TBCOLL_TIMEOUT");
  config.transport = env::get("TBCOLL_TRANSPORT");
  config.algo = env::get("TBCOLL_ALGO");
  return config;
}

}  // namespace tbcoll
