// Link emulation settings: what TBCOLL_LINK_EMULATION (and the older TBCOLL_LINK_DELAY_US) ask for, and the named
// presets with the figures they assume. The endpoint decorator that applies them is delay.h's with_emulation().
//
//   TBCOLL_LINK_EMULATION=latency_us=5,gbps=60     a link of 5 us one-way latency and 60 Gbit/s per direction
//   TBCOLL_LINK_EMULATION=tb5-rdma                 a preset (presets() lists them, tbcoll-info prints them)
//   TBCOLL_LINK_EMULATION=tb5-tcp,gbps=10          a preset with one figure changed
//   TBCOLL_LINK_EMULATION=tb5-rdma,dilate=100      the preset's link slowed down 100x: 500 us, 0.6 Gbit/s
//   TBCOLL_LINK_DELAY_US=300                       latency only (the older knob; same as latency_us=300)
//   TBCOLL_LINK_EMULATION=gbps=1,peers=1+3         only the links from ranks 1 and 3 to this one (a slow pair of a
//                                                  job: set it on both ends; the cost model prices every link alike)
//
// gbps is in gigabits per second, as link speeds are quoted (Thunderbolt 5: 80 Gbit/s); absent: no cap.
// Ranges: latency_us 0 to 1e6 (one second), gbps 0.001 to 1e6, dilate 1 to 10000, and the dilated link within
// the same ranges; anything else is refused.
//
// Time dilation: dilate=k multiplies the latency by k and divides the bandwidth by k, so the emulated link's time
// is k times the link's (the real transport underneath and the ranks' CPU work are not dilated). Where ranks
// share CPUs, their scheduling noise then shrinks against the links' time, and the cost model, which prices the
// dilated link (communicator.cc), can be judged against what the algorithms measure (benchmarks/tuner_sweep.sh).
#pragma once

#include <string>
#include <vector>

namespace tbcoll::transport {

struct LinkEmulation {
  std::string name;       ///< the preset's name, or "custom"; "" when off
  double latency_us = 0;  ///< added one-way latency per message, before dilation
  double gbit_per_s = 0;  ///< bandwidth cap per direction per peer, before dilation; 0: none
  double dilation = 1;    ///< time dilation k >= 1: latency x k, bandwidth / k (1: none)
  std::string assumes;    ///< for presets: where the figures come from
  std::vector<int> peers;  ///< the peers whose links to this rank are emulated; empty: every peer

  bool on() const { return latency_us > 0 || gbit_per_s > 0; }
  /// Whether the link from peer to this rank is emulated.
  bool applies_to(int peer) const;
  /// The one-way latency the link adds, dilated, in seconds.
  double one_way_seconds() const { return latency_us * dilation * 1e-6; }
  /// Seconds per byte on the emulated link, dilated (0 without a cap).
  double seconds_per_byte() const { return gbit_per_s > 0 ? 8.0 * dilation / (gbit_per_s * 1e9) : 0.0; }
  /// "tb5-rdma: +5 us one way, 60 Gbit/s (7.50 GB/s) per direction per peer", "tb5-rdma dilated 100x: +500 us
  /// one way, 0.6 Gbit/s (0.075 GB/s) per direction per peer (5 us, 60 Gbit/s undilated)", or "off".
  std::string describe() const;
};

/// The named presets, with the figures they assume.
const std::vector<LinkEmulation>& link_presets();

/// Parses TBCOLL_LINK_EMULATION's text (see above) and TBCOLL_LINK_DELAY_US (microseconds, 0: unset). Throws
/// InvalidArgument naming what is wrong: an unknown preset or key, a figure that is not a number or out of its
/// range (dilated or not), a dilation with no link to dilate, or both knobs set to different latencies.
LinkEmulation parse_link_emulation(const std::string& text, long long delay_us);

}  // namespace tbcoll::transport
