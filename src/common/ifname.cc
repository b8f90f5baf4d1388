#include "common/ifname.h"

#include <stdexcept>

namespace tbcoll::ifname {

Filter parse(const std::string& spec) {
  Filter filter;
  size_t at = 0;
  if (at < spec.size() && spec[at] == '^') {
    filter.exclude = true;
    ++at;
  }
  if (at < spec.size() && spec[at] == '=') {
    filter.exact = true;
    ++at;
  }
  if (at == spec.size()) {
    if (spec.empty()) return filter;
    throw std::invalid_argument("TBCOLL_SOCKET_IFNAME=\"" + spec + "\" names no interface");
  }
  while (true) {
    const size_t comma = spec.find(',', at);
    const std::string name = spec.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (name.empty()) throw std::invalid_argument("TBCOLL_SOCKET_IFNAME=\"" + spec + "\" has an empty name");
    filter.names.push_back(name);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return filter;
}

bool matches(const Filter& filter, const std::string& name) {
  if (filter.names.empty()) return true;
  bool listed = false;
  for (const std::string& entry : filter.names) {
    listed = listed || (filter.exact ? name == entry : name.compare(0, entry.size(), entry) == 0);
  }
  return listed != filter.exclude;
}

std::optional<platform::NetworkInterface> choose(const std::vector<platform::NetworkInterface>& interfaces,
                                                 const std::string& spec, bool allow_loopback) {
  const Filter filter = parse(spec);
  const bool by_default = filter.names.empty();
  std::optional<platform::NetworkInterface> loopback;
  for (bool ipv6 : {false, true}) {
    for (const platform::NetworkInterface& candidate : interfaces) {
      if (candidate.ipv6 != ipv6 || !matches(filter, candidate.name)) continue;
      if (by_default && candidate.name.compare(0, 6, "docker") == 0) continue;
      if (candidate.loopback) {
        if (allow_loopback && !by_default) return candidate;
        if (allow_loopback && !loopback) loopback = candidate;
        continue;
      }
      return candidate;
    }
  }
  return loopback;
}

std::string describe(const std::vector<platform::NetworkInterface>& interfaces) {
  std::string out;
  for (const platform::NetworkInterface& entry : interfaces) {
    if (!out.empty()) out += ", ";
    out += entry.name + " " + entry.address;
  }
  return out.empty() ? "no interface with an address" : out;
}

bool is_loopback_address(const std::string& host) {
  return host == "localhost" || host == "::1" || host.compare(0, 4, "127.") == 0;
}

}  // namespace tbcoll::ifname
