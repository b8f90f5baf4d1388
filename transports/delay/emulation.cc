#include "transports/delay/emulation.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tbcoll/error.hpp"

namespace tbcoll::transport {

const std::vector<LinkEmulation>& link_presets() {
  static const std::vector<LinkEmulation> presets = {
      {"tb5-rdma", 5, 60, 1,
       "Thunderbolt 5 RDMA (UC SEND) between two Macs: ib_send_lat 4.2-4.6 us; one queue pair ~75 Gbit/s raw, "
       "~50 Gbit/s end to end in MLX's JACCL (shared/notes/rdma.md)"},
      {"tb5-tcp", 300, 20, 1,
       "TCP over a Thunderbolt bridge: ~300 us per message as Mac-cluster all-reduces see it (the figure this "
       "project's README uses), and a CPU-bound 20 Gbit/s of the 80 Gbit/s line (assumed, not measured)"},
      {"10gbe", 25, 10, 1,
       "10 Gbit Ethernet through a switch: 10 Gbit/s line rate, ~25 us one-way through kernel TCP (assumed)"},
  };
  return presets;
}

bool LinkEmulation::applies_to(int peer) const {
  return peers.empty() || std::find(peers.begin(), peers.end(), peer) != peers.end();
}

std::string LinkEmulation::describe() const {
  if (!on()) return "off";
  if (!peers.empty()) {
    LinkEmulation every = *this;
    every.peers.clear();
    return fmt::format("{} (only from peers {})", every.describe(), fmt::join(peers, ", "));
  }
  const double gbps = gbit_per_s / dilation;
  std::string cap = gbit_per_s > 0
                        ? fmt::format("{:g} Gbit/s ({:.{}f} GB/s) per direction per peer", gbps, gbps / 8,
                                      gbps / 8 >= 0.1 ? 2 : 4)
                        : std::string("no bandwidth cap");
  if (dilation == 1) return fmt::format("{}: +{:g} us one way, {}", name, latency_us, cap);
  const std::string undilated =
      gbit_per_s > 0 ? fmt::format("{:g} us, {:g} Gbit/s", latency_us, gbit_per_s) : fmt::format("{:g} us", latency_us);
  return fmt::format("{} dilated {:g}x: +{:g} us one way, {} ({} undilated)", name, dilation, latency_us * dilation,
                     cap, undilated);
}

namespace {

// The ranges a figure may take (emulation.h), dilated or not: beyond them a duration overflows, or the link
// would apply no delay where one was asked for, or stall every call past any deadline.
constexpr double kMaxLatencyUs = 1e6, kMinGbps = 1e-3, kMaxGbps = 1e6, kMaxDilation = 1e4;

double figure(const std::string& key, const std::string& text, double low, double high, const char* range) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(value)) {
    throw InvalidArgument(fmt::format("[env] TBCOLL_LINK_EMULATION: {}={:?} is not a number", key, text));
  }
  if (value < low || value > high) {
    throw InvalidArgument(fmt::format("[env] TBCOLL_LINK_EMULATION: {}={} is out of range ({})", key, text, range));
  }
  return value;
}

// The dilated link within the ranges too.
void check_dilated(const LinkEmulation& link, const std::string& text) {
  if (link.dilation == 1) return;
  if (!link.on()) {
    throw InvalidArgument(fmt::format("[env] TBCOLL_LINK_EMULATION={:?}: dilate={:g} with no link to dilate (give a "
                                      "preset, latency_us or gbps)", text, link.dilation));
  }
  if (link.latency_us * link.dilation > kMaxLatencyUs) {
    throw InvalidArgument(fmt::format("[env] TBCOLL_LINK_EMULATION={:?}: {:g} us x dilate={:g} is {:g} us one way, "
                                      "beyond the {:g} us a link may add", text, link.latency_us, link.dilation,
                                      link.latency_us * link.dilation, kMaxLatencyUs));
  }
  if (link.gbit_per_s > 0 && link.gbit_per_s / link.dilation < kMinGbps) {
    throw InvalidArgument(fmt::format("[env] TBCOLL_LINK_EMULATION={:?}: {:g} Gbit/s / dilate={:g} is {:g} Gbit/s, "
                                      "below the {:g} Gbit/s a link may go down to", text, link.gbit_per_s,
                                      link.dilation, link.gbit_per_s / link.dilation, kMinGbps));
  }
}

// "1+3" -> {1, 3}: ranks, each 0 or more, joined by '+'.
std::vector<int> peer_list(const std::string& text, const std::string& value) {
  std::vector<int> peers;
  size_t start = 0;
  while (true) {
    const size_t plus = std::min(value.find('+', start), value.size());
    const std::string item = value.substr(start, plus - start);
    char* end = nullptr;
    const long peer = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || end == nullptr || *end != '\0' || peer < 0 || peer > (1 << 20)) {
      throw InvalidArgument(fmt::format("[env] TBCOLL_LINK_EMULATION={:?}: peers={:?} is not a list of ranks joined "
                                        "by '+' (peers=1+3)", text, value));
    }
    peers.push_back(static_cast<int>(peer));
    if (plus >= value.size()) break;
    start = plus + 1;
  }
  return peers;
}

std::string preset_names() {
  std::string names;
  for (const LinkEmulation& preset : link_presets()) names += (names.empty() ? "" : ", ") + preset.name;
  return names;
}

}  // namespace

LinkEmulation parse_link_emulation(const std::string& text, long long delay_us) {
  LinkEmulation link;
  size_t start = 0;
  bool first = true;
  while (start <= text.size() && !text.empty()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) {
      if (comma >= text.size()) break;
      continue;
    }
    const size_t equals = item.find('=');
    if (equals == std::string::npos) {
      bool found = false;
      for (const LinkEmulation& preset : link_presets()) {
        if (preset.name == item) {
          found = true;
          link = preset;
        }
      }
      if (!found || !first) {
        throw InvalidArgument(
            fmt::format("[env] TBCOLL_LINK_EMULATION={:?}: {:?} is {} (presets: {}; or "
                        "latency_us=N,gbps=N)",
                        text, item, found ? "a preset, which must come first" : "not a preset", preset_names()));
      }
    } else {
      const std::string key = item.substr(0, equals), value = item.substr(equals + 1);
      if (key == "peers") {
        link.peers = peer_list(text, value);
        first = false;
        if (comma >= text.size()) break;
        continue;
      }
      if (key == "dilate") {
        link.dilation = figure(key, value, 1, kMaxDilation, "1 to 10000: latency x N, bandwidth / N");
        first = false;
        if (comma >= text.size()) break;
        continue;  // the link's own figures stay what they are
      }
      if (key == "latency_us") {
        link.latency_us = figure(key, value, 0, kMaxLatencyUs, "0 to 1000000 us, one second one way");
      } else if (key == "gbps") {
        link.gbit_per_s = figure(key, value, kMinGbps, kMaxGbps, "0.001 to 1000000 Gbit/s; leave gbps out for no cap");
      } else {
        throw InvalidArgument(
            fmt::format("[env] TBCOLL_LINK_EMULATION={:?}: unknown key {:?} (latency_us, gbps, dilate, peers)", text, key));
      }
      if (link.name.empty()) link.name = "custom";
      link.assumes.clear();  // a changed preset no longer assumes what the preset says
      if (link.name.find('+') == std::string::npos && link.name != "custom") link.name += "+changes";
    }
    first = false;
    if (comma >= text.size()) break;
  }
  if (delay_us < 0 || static_cast<double>(delay_us) > kMaxLatencyUs) {
    throw InvalidArgument(fmt::format("[env] TBCOLL_LINK_DELAY_US={} is out of range (0 to {:g} us, one second "
                                      "one way; 0: off)", delay_us, kMaxLatencyUs));
  }
  if (delay_us > 0) {
    if (link.on() && link.latency_us != static_cast<double>(delay_us)) {
      throw InvalidArgument(
          fmt::format("[env] TBCOLL_LINK_DELAY_US={} and TBCOLL_LINK_EMULATION={:?} ask for "
                      "different latencies: set one",
                      delay_us, text));
    }
    if (!link.on()) link.name = "TBCOLL_LINK_DELAY_US";
    link.latency_us = static_cast<double>(delay_us);
  }
  check_dilated(link, text);
  if (!link.on()) return {};
  return link;
}

}  // namespace tbcoll::transport
