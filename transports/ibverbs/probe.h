// Which RDMA devices a rank can use, and what their ports look like: what the transport opens and what the RDMA
// diagnostics (tools/rdma_diag) report. Control-path verbs only; every context opened here is closed again.
#pragma once

#include <string>
#include <vector>

#include "transports/ibverbs/verbs.h"

namespace tbcoll::ibverbs {

/// A usable device and port, as found by probe_all().
struct Found {
  std::string name;
  uint8_t port = 1;  ///< the active one
  int gid_index = -1;
  ibv_gid gid{};
  uint16_t lid = 0;
  ibv_mtu mtu = IBV_MTU_1024;
  uint32_t max_msg_bytes = 0;  ///< the port's max_msg_sz (0: not said)
  bool active = false;         ///< a port is ACTIVE (usable once it has an IPv4-mapped GID)
};

/// The usable devices (among allowed, if any; in the order listed by the provider): an active port and an
/// IPv4-mapped GID. At least one, or throws IoError with what was found instead and how to fix it (no devices, ports
/// down, no IPv4 address behind the GID).
std::vector<Found> probe_all(const VerbsApi& verbs, const std::vector<std::string>& allowed);
inline Found probe(const VerbsApi& verbs, const std::vector<std::string>& allowed) {
  return probe_all(verbs, allowed).front();
}
/// ibv_port_state's name, as ibv_devinfo prints it ("ACTIVE", "DOWN", ...); other for any other state.
const char* port_state_name(int state, const char* other = "NOP");
/// Every device name the provider lists, usable or not (none when it lists none).
std::vector<std::string> device_names(const VerbsApi& verbs);

/// Opens the device named `name`; null (errno from the provider) when it is not listed or does not open.
ibv_context* open_device_named(const VerbsApi& verbs, const std::string& name);

/// The first ACTIVE port of an opened device (1..phys_port_cnt; Apple's is not always port 1), its attributes in
/// *attr; 0 when none is, *states then saying what each port is ("port 1 DOWN").
uint8_t active_port(const VerbsApi& verbs, ibv_context* context, ibv_port_attr* attr, std::string* states);

/// What an opened device offers on its active port; "" in *why_not when usable, else what is wrong and how to fix it.
Found inspect_port(const VerbsApi& verbs, ibv_context* context, const std::string& name, std::string* why_not);

/// Whether a GID is IPv4-mapped (::ffff:a.b.c.d), and the address inside one ("a.b.c.d").
bool ipv4_mapped(const ibv_gid& gid);
std::string ipv4_of(const ibv_gid& gid);

}  // namespace tbcoll::ibverbs
