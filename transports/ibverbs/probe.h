// Which RDMA devices a rank can use, and what their ports look like: what the transport opens and what the RDMA
// diagnostics (tools/rdma_diag) report. Control-path verbs only.
//
// A process opens each device once (opened_device): the probes at start-up, every communicator's ports (a world's,
// its splits', later communicators'), the ranks run as threads of the process and tbcoll-rdma-check all share that
// one context and its protection domain, which stay open until the process exits (the OS closes them; nothing is
// closed from a static destructor). Apple's stack has been seen to refuse protection domains ("couldn't allocate
// protection domain") and RTR (EINVAL) after many open/close cycles until a reboot (mlx 3207, exo 1847).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
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
/// IPv4-mapped GID. Through opened_device: the first probe opens each device, later ones only query its ports (so a
/// port re-addressed since is seen as it is now). At least one, or throws IoError with what was found instead and how to fix it (no devices, ports
/// down, no IPv4 address behind the GID).
std::vector<Found> probe_all(const VerbsApi& verbs, const std::vector<std::string>& allowed);
inline Found probe(const VerbsApi& verbs, const std::vector<std::string>& allowed) {
  return probe_all(verbs, allowed).front();
}
/// ibv_port_state's name, as ibv_devinfo prints it ("ACTIVE", "DOWN", ...); other for any other state.
const char* port_state_name(int state, const char* other = "NOP");
/// Every device name the provider lists, usable or not (none when it lists none).
std::vector<std::string> device_names(const VerbsApi& verbs);

/// Opens the device named `name`; null (errno from the provider) when it is not listed or does not open. The
/// caller closes it: what opened_device does once per process; anything else should call that instead.
ibv_context* open_device_named(const VerbsApi& verbs, const std::string& name);

/// An opened device and, once a port needs it (protection_domain()), its protection domain. The process's are
/// kept open for its whole life; one opened for a single caller (VerbsApi::open_scope false: the tests' fake hosts)
/// is closed when its last holder lets go: its port, the caller registrations on it (registry.h), a send in flight.
struct OpenDevice {
  const VerbsApi* verbs = nullptr;
  std::string name;
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;  ///< null until protection_domain() allocated it; written once, under mutex
  std::atomic<int> caller_registrations{0};  ///< live registrations of callers' memory (registry.h)
  int registration_limit = 0;          ///< callers' registrations it takes at most (0: no limit of ours)
  uint64_t max_registration_bytes = 0;  ///< the longest caller registration (0: no limit of ours)
  std::mutex mutex;                     ///< guards pd's allocation and the settings above being set once
  bool configured = false;              ///< registration_limit and max_registration_bytes are set (under mutex)
  OpenDevice(const VerbsApi* verbs, std::string name, ibv_context* context)
      : verbs(verbs), name(std::move(name)), context(context) {}
  ~OpenDevice();
  OpenDevice(const OpenDevice&) = delete;
  OpenDevice& operator=(const OpenDevice&) = delete;
  /// The protection domain, allocated on the first call (IoError with the fix when the device refuses one). Any
  /// thread.
  ibv_pd* protection_domain();
};

/// The device named `name` as this process opened it: opened on the first call (IoError naming the device and the
/// fix when it is not listed or does not open; a later call tries again), then the same one to every caller, from
/// any thread. Kept open until the process exits.
std::shared_ptr<OpenDevice> opened_device(const VerbsApi& verbs, const std::string& name);

/// The first ACTIVE port of an opened device (1..phys_port_cnt; Apple's is not always port 1), its attributes in
/// *attr; 0 when none is, *states then saying what each port is ("port 1 DOWN").
uint8_t active_port(const VerbsApi& verbs, ibv_context* context, ibv_port_attr* attr, std::string* states);

/// What an opened device offers on its active port; "" in *why_not when usable, else what is wrong and how to fix it.
Found inspect_port(const VerbsApi& verbs, ibv_context* context, const std::string& name, std::string* why_not);

/// Whether a GID is IPv4-mapped (::ffff:a.b.c.d), and the address inside one ("a.b.c.d").
bool ipv4_mapped(const ibv_gid& gid);
std::string ipv4_of(const ibv_gid& gid);

}  // namespace tbcoll::ibverbs
