// What a rank's RDMA devices look like before anything connects, and how far they let us go: the first two
// sections of tbcoll-rdma-check's report. Read-only but for the limit probes, which create queue pairs,
// registrations and receives up to a cap and free them all again. Only verbs of Apple's subset.
#pragma once

#include <string>
#include <vector>

#include "transports/ibverbs/mode.h"
#include "transports/ibverbs/verbs.h"

namespace tbcoll::ibverbs {

struct GidEntry {
  int index = 0;
  std::string text;  ///< "fe80::...", "::ffff:10.9.0.1"
  bool ipv4_mapped = false;
  std::string ipv4;  ///< the address inside an IPv4-mapped GID
};

struct PortReport {
  std::string device;
  uint8_t port = 1;       ///< the active port (port 1 when none is)
  std::string interface;  ///< the paired network interface (hints::paired_interface), "" if unknown
  std::string state = "?";
  std::string link_layer;
  int active_mtu = 0;  ///< bytes
  int max_mtu = 0;
  uint64_t max_msg_bytes = 0;
  int gid_table = 0;           ///< entries the port has
  std::vector<GidEntry> gids;  ///< the non-zero ones
  int ipv4_gid_index = -1;
  std::string ipv4;
  std::string ipv4_owner;  ///< the local interface holding that IPv4 address ("" if none: a stale GID)
  int prefix = -1;         ///< that interface's netmask length (VerbsApi::ipv4_prefix), -1 unknown
  bool usable = false;
  std::string problem;  ///< why not usable
  std::string fix;
};

struct PreflightReport {
  bool available = false;  ///< a verbs library and at least one device
  std::string provider;    ///< "libibverbs.so.1 (/usr/lib/.../libibverbs.so.1.14.44.0)", "fake"
  std::string problem;     ///< when not available
  std::string fix;
  std::vector<PortReport> ports;  ///< one per device (its active port)
};

/// Lists the devices and inspects the active port of each. verbs may be null (why_no_verbs then says why).
PreflightReport preflight(const VerbsApi* verbs, const std::string& why_no_verbs);

/// The report's text: one indented block per device, then one PASS/FAIL line per device (SKIP for an unusable one
/// when another is usable).
std::string format_preflight(const PreflightReport& report);

struct LimitProbe {
  std::string what;  ///< "queue pairs"
  int accepted = 0;
  int cap = 0;          ///< the probe stopped here without a failure
  std::string stopped;  ///< the verb's error and its fix when it stopped before the cap
  std::string error;    ///< the probe could not run at all
  std::string skipped;  ///< why it was not run (not a failure)
};

struct LimitReport {
  std::string device;
  LimitProbe queue_pairs, registrations, receives;
};

/// How far the probes go: what tbcoll itself takes on the device, no further (each probe uses up what it tests
/// until it frees it, and Apple's stack has been seen to degrade after many cycles: mlx 3207, exo 1847). 0 / -1:
/// derived from the device (limit_caps).
struct LimitCaps {
  int queue_pairs = 0;    ///< the transport's queue pair budget there (auto_queue_pair_budget: <= 10 on Apple), <= 64
  int registrations = 0;  ///< one per link (a queue pair budget's worth) + the callers' share of max_mr, <= 256
  int receives = 0;       ///< Connection::kSmallDepth: what a link keeps posted on its small lane
  int loopback = -1;      ///< receives probed on two of the device's queue pairs connected to each other: 1, 0, or
                          ///< -1: not on Apple's Thunderbolt (tbcoll never loops a queue pair back there)
};

/// The caps for `device` (opened_device, query_device), with the given fields kept where they are set.
LimitCaps limit_caps(const VerbsApi& verbs, const std::string& device, const LimitCaps& given = {});

/// How many queue pairs (of `mode`), 4 KiB memory registrations and outstanding 4 KiB receives the device
/// accepts, each up to its cap (limit_caps); everything created is freed, on the process's opened device (probe.h).
/// device "" = the first usable one. Never throws for what the device refuses (that is the result); IoError when
/// no device is usable.
LimitReport probe_limits(const VerbsApi& verbs, const std::string& device, Mode mode, const LimitCaps& caps = {});

/// The report's text: a line per probe.
std::string format_limits(const LimitReport& report);

}  // namespace tbcoll::ibverbs
