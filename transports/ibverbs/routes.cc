#include "transports/ibverbs/routes.h"

#include <algorithm>
#include <functional>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tbcoll/error.hpp"
#include "transports/ibverbs/connection.h"

namespace tbcoll::ibverbs {
namespace {

constexpr const char* kMagic = "tbcoll-ibverbs-3";

using Net = ContextAddress::Net;

std::string rank_text(const ContextAddress& side) {
  return side.host.empty() ? fmt::format("rank {}", side.instance)
                           : fmt::format("rank {} on host {}", side.instance, side.host);
}

void decode_line(const std::string& kind, std::istringstream& words, ContextAddress* out, bool* routes_seen,
                 const std::function<InvalidArgument(const std::string&)>& malformed) {
  if (kind == "instance") {
    if (!(words >> out->instance)) throw malformed("instance");
  } else if (kind == "host") {
    words >> out->host;
  } else if (kind == "port") {
    std::string port;
    words >> port;
    Port::parse(port);  // throws if malformed
    out->ports.push_back(port);
  } else if (kind == "budget") {
    std::string device;
    int limit = -1;
    if (!(words >> device >> limit) || limit < 0) throw malformed("budget");
    out->budget[device] = limit;
  } else if (kind == "net") {
    Net net;
    std::string apple;
    if (!(words >> net.device >> net.ipv4 >> net.prefix >> apple) || net.prefix < -1 || net.prefix > 32) {
      throw malformed("net");
    }
    net.apple = apple == "apple";
    out->nets.push_back(net);
  } else if (kind == "route") {
    std::string peer, device;
    words >> peer;
    std::vector<std::string> devices;
    while (words >> device) devices.push_back(device);
    *routes_seen = true;
    if (peer == "*") {
      out->kind = ContextAddress::Kind::kEveryPeer;
      out->devices = devices;
    } else if (peer == "~") {
      out->kind = ContextAddress::Kind::kSubnets;
      if (devices.size() != 1) throw malformed("route ~");
      out->rails = std::atoi(devices[0].c_str());
      if (out->rails < 1) throw malformed("route ~");
    } else {
      try {
        out->routes[std::stoi(peer)] = devices;
      } catch (const std::exception&) {
        throw malformed("route");
      }
    }
  } else if (!kind.empty()) {
    throw malformed("unknown line " + kind);
  }
}

}  // namespace

std::vector<std::string> ContextAddress::route_to(int peer) const {
  if (peer == instance) return {};
  if (kind == Kind::kEveryPeer) return devices;
  auto it = routes.find(peer);
  return it == routes.end() ? std::vector<std::string>{} : it->second;
}

int ContextAddress::place_of(int peer, const std::string& device) const {
  if (kind == Kind::kSubnets) return 0;  // checked once all peers are known (Context::connect)
  if (kind == Kind::kEveryPeer) return peer < instance ? peer : peer - 1;
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
  if (!address.host.empty()) out += fmt::format(";host {}", address.host);
  for (const std::string& port : address.ports) out += fmt::format(";port {}", port);
  for (const auto& [device, limit] : address.budget) out += fmt::format(";budget {} {}", device, limit);
  switch (address.kind) {
    case ContextAddress::Kind::kEveryPeer:
      out += fmt::format(";route * {}", fmt::join(address.devices, " "));
      break;
    case ContextAddress::Kind::kMatrix:
      for (const auto& [peer, devices] : address.routes) out += fmt::format(";route {} {}", peer, fmt::join(devices, " "));
      break;
    case ContextAddress::Kind::kSubnets:
      for (const Net& net : address.nets) {
        out += fmt::format(";net {} {} {} {}", net.device, net.ipv4, net.prefix, net.apple ? "apple" : "other");
      }
      out += fmt::format(";route ~ {}", address.rails);
      break;
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
  out.kind = ContextAddress::Kind::kMatrix;
  bool routes_seen = false;
  while (std::getline(lines, line, ';')) {
    std::istringstream words(line);
    std::string kind;
    words >> kind;
    decode_line(kind, words, &out, &routes_seen, malformed);
  }
  if (out.instance < 0 || out.ports.empty() || !routes_seen) throw malformed("instance, ports or routes missing");
  return out;
}

std::vector<Rail> rails_between(const ContextAddress& self, const ContextAddress& peer, std::string* why_not) {
  std::string why;
  auto decline = [&](const std::string& text) {
    if (why_not != nullptr) *why_not = text;
    return std::vector<Rail>{};
  };
  std::vector<std::string> mine, theirs;
  if (self.kind == ContextAddress::Kind::kSubnets && peer.kind == ContextAddress::Kind::kSubnets) {
    const bool self_lower = self.instance < peer.instance;
    const ContextAddress& lower = self_lower ? self : peer;
    const ContextAddress& higher = self_lower ? peer : self;
    for (const auto& [low, high] : cables_by_subnet(lower.nets, rank_text(lower), higher.nets, rank_text(higher),
                                                    std::min(lower.rails, higher.rails), &why)) {
      mine.push_back(self_lower ? low : high);
      theirs.push_back(self_lower ? high : low);
    }
    if (mine.empty()) return decline(why);
  } else {
    if (self.kind == ContextAddress::Kind::kSubnets || peer.kind == ContextAddress::Kind::kSubnets) {
      return decline(fmt::format("ranks {} and {} choose their devices differently (by subnet, and by "
                                 "TBCOLL_IB_DEVICES or a device matrix): set them alike on every rank",
                                 self.instance, peer.instance));
    }
    mine = self.route_to(peer.instance);
    theirs = peer.route_to(self.instance);
    if (mine.empty() || theirs.empty()) {
      return decline(fmt::format("the device matrix has no cable between ranks {} and {}", self.instance,
                                 peer.instance));
    }
  }
  // Both ends check both budgets, so they agree.
  auto over = [](const ContextAddress& side, int other, const std::string& device, std::string* text) {
    auto it = side.budget.find(device);
    if (it == side.budget.end() || it->second == 0) return false;
    if (side.place_of(other, device) < it->second) return false;
    *text = fmt::format("{} of rank {} has queue pairs for {} peers (TBCOLL_IB_MAX_QPS={}: about 10 per device on "
                        "macOS), all taken by ranks below {}",
                        device, side.instance, it->second, it->second, other);
    return true;
  };
  std::vector<Rail> rails;
  for (size_t k = 0; k < std::min(mine.size(), theirs.size()); ++k) {
    if (over(self, peer.instance, mine[k], &why) || over(peer, self.instance, theirs[k], &why)) return decline(why);
    rails.push_back({mine[k], peer.port_of(theirs[k])});
  }
  return rails;
}

}  // namespace tbcoll::ibverbs
