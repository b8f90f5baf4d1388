// Link emulation settings: what TBCOLL_LINK_EMULATION (and the older TBCOLL_LINK_DELAY_US) ask for, and the named
// presets with the figures they assume. The endpoint decorator that applies them is delay.h's with_emulation().
//
//   TBCOLL_LINK_EMULATION=latency_us=5,gbps=60     a link of 5 us one-way latency and 60 Gbit/s per direction
//   TBCOLL_LINK_EMULATION=tb5-rdma                 a preset (presets() lists them, tbcoll-info prints them)
//   TBCOLL_LINK_EMULATION=tb5-tcp,gbps=10          a preset with one figure changed
//   TBCOLL_LINK_DELAY_US=300                       latency only (the older knob; same as latency_us=300)
//
// gbps is in gigabits per second, as link speeds are quoted (Thunderbolt 5: 80 Gbit/s); 0 or absent: no cap.
#pragma once

#include <string>
#include <vector>

namespace tbcoll::transport {

struct LinkEmulation {
  std::string name;       ///< the preset's name, or "custom"; "" when off
  double latency_us = 0;  ///< added one-way latency per message
  double gbit_per_s = 0;  ///< bandwidth cap per direction per peer; 0: none
  std::string assumes;    ///< for presets: where the figures come from

  bool on() const { return latency_us > 0 || gbit_per_s > 0; }
  /// Seconds per byte on the emulated link (0 without a cap).
  double seconds_per_byte() const { return gbit_per_s > 0 ? 8.0 / (gbit_per_s * 1e9) : 0.0; }
  /// "tb5-rdma: +5 us one way, 60 Gbit/s (7.50 GB/s) per direction per peer", or "off".
  std::string describe() const;
};

/// The named presets, with the figures they assume.
const std::vector<LinkEmulation>& link_presets();

/// Parses TBCOLL_LINK_EMULATION's text (see above) and TBCOLL_LINK_DELAY_US (microseconds, 0: unset). Throws
/// InvalidArgument naming what is wrong: an unknown preset or key, a figure that is not a non-negative number,
/// or both knobs set to different latencies.
LinkEmulation parse_link_emulation(const std::string& text, long long delay_us);

}  // namespace tbcoll::transport
