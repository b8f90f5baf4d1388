#include "transports/delay/emulation.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "tbcoll/error.hpp"

namespace tbcoll::transport {

const std::vector<LinkEmulation>& link_presets() {
  static const std::vector<LinkEmulation> presets = {
      {"tb5-rdma", 5, 60,
       "Thunderbolt 5 RDMA (UC SEND) between two Macs: ib_send_lat 4.2-4.6 us; one queue pair ~75 Gbit/s raw, "
       "~50 Gbit/s end to end in MLX's JACCL (shared/notes/rdma.md)"},
      {"tb5-tcp", 300, 20,
       "TCP over a Thunderbolt bridge: ~300 us per message as Mac-cluster all-reduces see it (the figure this "
       "project's README uses), and a CPU-bound 20 Gbit/s of the 80 Gbit/s line (assumed, not measured)"},
      {"10gbe", 25, 10,
       "10 Gbit Ethernet through a switch: 10 Gbit/s line rate, ~25 us one-way through kernel TCP (assumed)"},
  };
  return presets;
}

std::string LinkEmulation::describe() const {
  if (!on()) return "off";
  std::string cap = gbit_per_s > 0
                        ? fmt::format("{:g} Gbit/s ({:.2f} GB/s) per direction per peer", gbit_per_s, gbit_per_s / 8)
                        : std::string("no bandwidth cap");
  return fmt::format("{}: +{:g} us one way, {}", name, latency_us, cap);
}

namespace {

double figure(const std::string& key, const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(value) || value < 0) {
    throw InvalidArgument(fmt::format("[env] TBCOLL_LINK_EMULATION: {}={:?} is not a non-negative number", key, text));
  }
  return value;
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
      if (key == "latency_us") {
        link.latency_us = figure(key, value);
      } else if (key == "gbps") {
        link.gbit_per_s = figure(key, value);
      } else {
        throw InvalidArgument(
            fmt::format("[env] TBCOLL_LINK_EMULATION={:?}: unknown key {:?} (latency_us, gbps)", text, key));
      }
      if (link.name.empty()) link.name = "custom";
      link.assumes.clear();  // a changed preset no longer assumes what the preset says
      if (link.name.find('+') == std::string::npos && link.name != "custom") link.name += "+changes";
    }
    first = false;
    if (comma >= text.size()) break;
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
  if (!link.on()) return {};
  return link;
}

}  // namespace tbcoll::transport
