// tbcoll-rdma-check's checks, apart from its command line so the tests can run them on the fake verbs provider
// (ranks as threads, an in-memory store). Every rank runs its local checks (preflight, limit probes); with two
// ranks they then meet through the store and check the link between them with plain verbs (a verified send sweep,
// latency, bandwidth: raw_link.h, the same code as tbcoll-perf's floors) and a 2-rank all_reduce over the ibverbs
// transport. The report is plain text, one PASS/FAIL/SKIP line per check with the reason and the fix.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "tbcoll/tbcoll.hpp"
#include "transports/ibverbs/connection.h"
#include "transports/ibverbs/verbs.h"

namespace tbcoll::rdma_check {

struct Options {
  ibverbs::Mode mode = ibverbs::Mode::kUc;
  /// "" = the device on the subnet both ranks' ports share; "rdma_en3" for both ranks; "rdma_en3,rdma_en2": rank
  /// 0's and rank 1's (the two ends of a cable have different names)
  std::string device;
  std::string transport = "ibverbs";  ///< of the all_reduce check (the tests register "fakeverbs")
  /// The limit probes (preflight.h probe_limits, each up to what tbcoll takes on the device): kAuto runs them
  /// everywhere but on Apple's Thunderbolt (librdma, rdma_enN devices), where they are opt-in (--limits).
  enum class Limits { kAuto, kOn, kOff } limits = Limits::kAuto;
  size_t sweep_min = 4096;
  size_t sweep_max = size_t{16} << 20;  ///< clamped to the largest message the link sends (Apple: 16 MiB - 4 KiB)
  size_t latency_bytes = 8;
  int round_trips = 10000;
  size_t bandwidth_bytes = size_t{1} << 20;
  int messages = 512;
  double message_timeout_s = 10;
  int allreduce_iterations = 1000;            ///< 8 B all_reduce calls timed
  size_t allreduce_bytes = size_t{16} << 20;  ///< the bandwidth all_reduce
  double timeout_s = 60;                      ///< the all_reduce communicator's
  /// Called on rank 0 before each two-rank phase ("sweep", "latency", "bandwidth", "zero-copy", "all_reduce")
  /// starts moving data: the tests inject faults there.
  std::function<void(const std::string& phase)> before_phase;
};

/// Where it runs.
struct Site {
  const ibverbs::VerbsApi* verbs = nullptr;  ///< null: no verbs library (why_no_verbs)
  std::string why_no_verbs;
  int rank = 0;
  int world_size = 1;            ///< 1 (local checks only) or 2
  std::shared_ptr<Store> store;  ///< world_size 2
  std::shared_ptr<TcpStoreServer> server;
  std::string prefix = "tbcoll-rdma-check";
  std::string version;  ///< tbcoll's
};

struct Outcome {
  int passed = 0, failed = 0, skipped = 0;
  /// Of the failures, ranks where RDMA is not available at all (no verbs library, or no device): nothing could be
  /// checked there.
  int unavailable = 0;
  std::string report;  ///< the whole report (rank 0, or a single rank); a pointer to rank 0's on rank 1
};

/// Runs every check. Never throws for what it finds (that is the report); throws only for bad options or a store
/// that fails. With two ranks both must call it.
Outcome run(const Options& options, const Site& site);

}  // namespace tbcoll::rdma_check
