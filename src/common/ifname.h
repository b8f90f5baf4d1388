// Which network interface carries a job's traffic: TBCOLL_SOCKET_IFNAME, read as NCCL reads NCCL_SOCKET_IFNAME.
//
//   "en5"          interfaces whose name starts with en5 (en5, en50, ...)
//   "eth,ib"       names starting with eth or ib
//   "=bridge0"     exactly bridge0 (a leading '=' makes every name of the list exact)
//   "^docker,lo"   everything except names starting with docker or lo
//   "^=eth0"       everything except exactly eth0
//   ""             any interface but docker* and loopback ones; loopback only where asked for and nothing else has
//                  an address
//
// Pure rules over the platform's interface list (platform::network_interfaces), shared by the library (the tcp and
// ibverbs listeners) and tbcoll-run (the rendezvous root of a multi-host job), which does not link the library:
// no tbcoll::Error here, std::invalid_argument instead.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "platform/platform.h"

namespace tbcoll::ifname {

struct Filter {
  bool exclude = false;  ///< '^': the names say what not to use
  bool exact = false;    ///< '=': whole names, not prefixes
  std::vector<std::string> names;
};

/// Parses a TBCOLL_SOCKET_IFNAME value; throws std::invalid_argument naming what is wrong (an empty name in the
/// list, "^" alone).
Filter parse(const std::string& spec);

/// Whether interface `name` passes the filter.
bool matches(const Filter& filter, const std::string& name);

/// The address to use among `interfaces`: the first that passes `spec`, IPv4 before IPv6. A loopback address only
/// when allow_loopback (single-host jobs) and, with an empty spec, only when no other interface has an address;
/// a spec that names a loopback interface ("lo") chooses it when allowed. With an empty spec docker* interfaces are
/// skipped. std::nullopt when nothing fits.
std::optional<platform::NetworkInterface> choose(const std::vector<platform::NetworkInterface>& interfaces,
                                                 const std::string& spec, bool allow_loopback);

/// "lo 127.0.0.1, eth0 10.0.0.2": for error messages that say what there was to choose from.
std::string describe(const std::vector<platform::NetworkInterface>& interfaces);

/// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_address(const std::string& host);

}  // namespace tbcoll::ifname
