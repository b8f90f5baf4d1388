// The hosts of a multi-host job: --hosts h1[:slots],h2[:slots] or --hostfile FILE, either one `host [slots=N]` per
// line (# comments; OpenMPI's hostfile format) or MLX's JSON hostfile, so users of mlx.launch reuse theirs:
//
//   [{"ssh": "m1", "ips": ["10.0.5.1"]}, {"ssh": "m2", "ips": ["10.0.5.2"]}]
//   {"backend": "...", "envs": ["NAME=VALUE"], "hosts": [{"ssh": "m1", "ips": [...], "rdma": [...]}, ...]}
//
// (one slot per host as in mlx.launch unless an entry says "slots"; the first of "ips" is where the host's rank 0
// serves the rendezvous, and "envs" are forwarded like -x). Ranks are placed host by host, in order.
//
// "rdma", where hosts have it, is mlx.launch's device matrix, one row per host: for each host, null or [] (no cable:
// the host itself, or a host it has no cable to), a device name, or a list of names (one per cable). tbcoll-run
// hands it to the ranks as TBCOLL_IB_DEVICES (rank_device_matrix): ranks on one host meet over shm, ranks on two
// hosts over their hosts' cables.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace tbcoll::run {

struct Host {
  std::string name;     ///< what the agent command gets (ssh destination, namespace, ...)
  int slots = 1;
  std::string address;  ///< where this host's ranks are reached, if the hostfile says ("ips"); else chosen there
  bool has_rdma = false;                        ///< the entry has "rdma"
  std::vector<std::vector<std::string>> rdma;  ///< per host: the devices cabled to it (empty: none)
};

struct HostList {
  std::vector<Host> hosts;
  std::vector<std::string> env;  ///< NAME=VALUE from an MLX hostfile's "envs"
};

/// Thrown with a message that names the file, line or item.
class HostError : public std::runtime_error {
 public:
  explicit HostError(const std::string& what) : std::runtime_error(what) {}
};

/// "h1:2,h2" -> {h1, 2}, {h2, 1}. IPv6 literals go in brackets: "[fd00::1]:2".
HostList parse_hosts(const std::string& text);
/// The contents of a hostfile named `path` (for messages): JSON if it starts with '[' or '{', else lines.
HostList parse_hostfile(const std::string& text, const std::string& path);

/// The host of each rank: the first host's slots, then the next host's, ...; world_size 0 means every slot.
/// Throws HostError when world_size exceeds the slots.
std::vector<int> place_ranks(const HostList& list, int world_size);

/// The hosts' "rdma" matrix for the ranks placed on them (placed: the host of each rank), as the JSON
/// TBCOLL_IB_DEVICES takes: a rank's cell for a rank on another host is its host's cell for that host, for a rank
/// on its own host null. "" when no host has "rdma". Throws HostError when some hosts have it and others not.
std::string rank_device_matrix(const HostList& list, const std::vector<int>& placed);

}  // namespace tbcoll::run
