#include "transports/ibverbs/routes.h"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tbcoll/error.hpp"

namespace tbcoll::ibverbs {
namespace {

constexpr const char* kMagic = "tbcoll-ibverbs-2";

}  // namespace

std::vector<std::string> ContextAddress::route_to(int peer) const {
  if (peer == instance) return {};
  if (every_peer) return devices;
  auto it = routes.find(peer);
  return it == routes.end() ? std::vector<std::string>{} : it->second;
}

int ContextAddress::place_of(int peer, const std::string& device) const {
  if (every_peer) return peer < instance ? peer : peer - 1;
  int place = 0;
  for (const auto& [other, names] : routes) {
    if (other >= peer) break;
    if (other != instance && std::find(names.begin(), names.end(), device) != names.end()) ++place;
  }
  return place;
}

PortAddress ContextAddress::port_of(const std::string& device) const {
  for (const std::string& port : ports) {
    PortAddress parsed = Port::parse(port);
    if (parsed.device == device) return parsed;
  }
  throw InvalidArgument(fmt::format("[ibverbs] rank {} publishes no port on {}", instance, device));
}

std::string encode(const ContextAddress& address) {
  // One line of text (the communicator's records are line-based): entries apart by ';', words by ' '.
  std::string out = fmt::format("{};instance {}", kMagic, address.instance);
  for (const std::string& port : address.ports) out += fmt::format(";port {}", port);
  for (const auto& [device, limit] : address.budget) out += fmt::format(";budget {} {}", device, limit);
  if (address.every_peer) {
    out += fmt::format(";route * {}", fmt::join(address.devices, " "));
  } else {
    for (const auto& [peer, devices] : address.routes) out += fmt::format(";route {} {}", peer, fmt::join(devices, " "));
  }
  return out;
}

ContextAddress decode_context_address(const std::string& text) {
  auto malformed = [&](const std::string& what) {
    return InvalidArgument(fmt::format("[ibverbs] malformed context address ({}): {:?}", what, text));
  };
  std::istringstream lines(text);
  std::string line;
  if (!std::getline(lines, line, ';') || line != kMagic) throw malformed("not a tbcoll ibverbs address of this version");
  ContextAddress out;
  out.every_peer = false;
  bool routes_seen = false;
  while (std::getline(lines, line, ';')) {
    std::istringstream words(line);
    std::string kind;
    words >> kind;
    if (kind == "instance") {
      if (!(words >> out.instance)) throw malformed("instance");
    } else if (kind == "port") {
      std::string port;
      words >> port;
      Port::parse(port);  // throws if malformed
      out.ports.push_back(port);
    } else if (kind == "budget") {
      std::string device;
      int limit = -1;
      if (!(words >> device >> limit) || limit < 0) throw malformed("budget");
      out.budget[device] = limit;
    } else if (kind == "route") {
      std::string peer, device;
      words >> peer;
      std::vector<std::string> devices;
      while (words >> device) devices.push_back(device);
      routes_seen = true;
      if (peer == "*") {
        out.every_peer = true;
        out.devices = devices;
      } else {
        try {
          out.routes[std::stoi(peer)] = devices;
        } catch (const std::exception&) {
          throw malformed("route");
        }
      }
    } else if (!kind.empty()) {
      throw malformed("unknown line " + kind);
    }
  }
  if (out.instance < 0 || out.ports.empty() || !routes_seen) throw malformed("instance, ports or routes missing");
  return out;
}

std::vector<Rail> rails_between(const ContextAddress& self, const ContextAddress& peer, std::string* why_not) {
  const std::vector<std::string> mine = self.route_to(peer.instance);
  const std::vector<std::string> theirs = peer.route_to(self.instance);
  auto decline = [&](const std::string& why) {
    if (why_not != nullptr) *why_not = why;
    return std::vector<Rail>{};
  };
  if (mine.empty() || theirs.empty()) {
    return decline(fmt::format("the device matrix has no cable between ranks {} and {}", self.instance,
                               peer.instance));
  }
  // Both ends check both budgets, so they agree.
  auto over = [](const ContextAddress& side, int other, const std::string& device, std::string* why) {
    auto it = side.budget.find(device);
    if (it == side.budget.end() || it->second == 0) return false;
    const int place = side.place_of(other, device);
    if (place < it->second) return false;
    *why = fmt::format("{} of rank {} has queue pairs for {} peers (TBCOLL_IB_MAX_QPS={}: about 10 per device on "
                       "macOS), all taken by ranks below {}",
                       device, side.instance, it->second, it->second, other);
    return true;
  };
  std::vector<Rail> rails;
  for (size_t k = 0; k < std::min(mine.size(), theirs.size()); ++k) {
    std::string why;
    if (over(self, peer.instance, mine[k], &why) || over(peer, self.instance, theirs[k], &why)) return decline(why);
    rails.push_back({mine[k], peer.port_of(theirs[k])});
  }
  return rails;
}

}  // namespace tbcoll::ibverbs
