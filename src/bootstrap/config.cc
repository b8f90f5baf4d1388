// Config::from_env: TBCOLL_* first, then the launcher variables of OpenMPI, PMI and Slurm, then torch's (torchrun,
// env://). A process that none of them describes runs alone, and says so.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "common/env.h"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll {
namespace {

constexpr int kMaxWorldSize = 1 << 24;

int int_from(const char* name, const char* value) {
  char* end = nullptr;
  long parsed = std::strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || parsed < 0 || parsed > kMaxWorldSize) {
    throw InvalidArgument(fmt::format("[bootstrap] {}={:?} is not a valid rank or size", name, value));
  }
  return static_cast<int>(parsed);
}

// A rank or size and the variable it came from ("" and -1 when none is set).
struct Found {
  const char* name = "";
  int value = -1;
};

// The first variable of the list that is set. torch's RANK and WORLD_SIZE are generic names: they count only as a
// pair (torchrun and env:// set both).
Found first_set(std::initializer_list<const char*> names) {
  const bool torch_pair = std::getenv("RANK") != nullptr && std::getenv("WORLD_SIZE") != nullptr;
  for (const char* name : names) {
    const bool torch = std::string(name) == "RANK" || std::string(name) == "WORLD_SIZE";
    if (torch && !torch_pair) continue;
    if (const char* value = std::getenv(name)) return {name, int_from(name, value)};
  }
  return {};
}

constexpr const char* kRankNames = "TBCOLL_RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID or torch's RANK";
constexpr const char* kSizeNames =
    "TBCOLL_WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS or torch's WORLD_SIZE";

// TBCOLL_ROOT, else torch's MASTER_ADDR and MASTER_PORT + 1: torch's own store (c10d's TCPStore, or torchrun's
// agent) already holds MASTER_PORT itself.
std::string root_from_env() {
  const std::string root = env::get("TBCOLL_ROOT");
  if (!root.empty()) return root;
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  if (addr == nullptr || port == nullptr || *addr == '\0') return "";
  char* end = nullptr;
  const long number = std::strtol(port, &end, 10);
  if (*port == '\0' || *end != '\0' || number < 1 || number > 65534) {
    throw InvalidArgument(fmt::format("[bootstrap] MASTER_PORT={:?} is not a port (1-65534; tbcoll's rendezvous "
                                      "takes the next one, TBCOLL_ROOT=host:port sets it)", port));
  }
  const std::string host = std::string(addr).find(':') != std::string::npos ? fmt::format("[{}]", addr) : addr;
  return fmt::format("{}:{}", host, number + 1);
}

// A transport's name: any registered one (built in or a plug-in's), which the set-up checks once the plug-ins are
// loaded (publish_identity names the transports there are); here only what no name can be.
void check_transport_name(const std::string& name) {
  const bool word = std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.';
  });
  if (word) return;
  throw InvalidArgument(fmt::format("[config] TBCOLL_TRANSPORT={:?} is not a transport's name (letters, digits, "
                                    "'_', '-', '.'; unset: the best per peer)", name));
}

}  // namespace

Config Config::from_env() {
  env::warn_unknown_variables();
  Config config;
  const Found rank = first_set({"TBCOLL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"});
  const Found size =
      first_set({"TBCOLL_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "WORLD_SIZE"});
  if (rank.value < 0 && size.value < 0) {
    // Not launched by anything: rank 0 of 1. Said aloud when such a communicator is built (env::warn_running_alone:
    // a caller may still set the rank and size, as UniqueId's init does).
    config.rank = 0;
    config.world_size = 1;
  } else if (size.value < 0) {
    throw InvalidArgument(fmt::format("[config] {}={} is set but no world size ({})", rank.name, rank.value,
                                      kSizeNames));
  } else if (rank.value < 0) {
    if (size.value != 1) {
      throw InvalidArgument(fmt::format("[config] {}={} is set but no rank ({})", size.name, size.value, kRankNames));
    }
    config.rank = 0;  // a world of one, asked for
    config.world_size = 1;
  } else {
    if (size.value < 1 || rank.value >= size.value) {
      throw InvalidArgument(fmt::format("[config] {}={} is out of range for {}={} (ranks are 0 to size - 1)",
                                        rank.name, rank.value, size.name, size.value));
    }
    config.rank = rank.value;
    config.world_size = size.value;
  }
  config.root = root_from_env();
  config.token = env::get("TBCOLL_TOKEN");
  config.timeout_s = env::get_double("TBCOLL_TIMEOUT");
  config.transport = env::get("TBCOLL_TRANSPORT");
  check_transport_name(config.transport);
  config.algo = env::get("TBCOLL_ALGO");
  return config;
}

}  // namespace tbcoll
