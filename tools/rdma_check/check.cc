#include "tools/rdma_check/check.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "tools/rdma_diag/floors.h"
#include "tools/rdma_diag/preflight.h"
#include "tools/rdma_diag/raw_link.h"
#include "tools/rdma_diag/zero_copy.h"

namespace tbcoll::rdma_check {
namespace {

using Clock = std::chrono::steady_clock;

std::string size_text(size_t bytes) {
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= (size_t{1} << 20) && ((size_t{16} << 20) - bytes) == 4096) return "16 MiB - 4 KiB";
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

std::string system_line() {
  utsname name{};
  if (uname(&name) != 0) return "unknown system";
  return fmt::format("{} {} {}", name.sysname, name.release, name.machine);
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

// The device `rank` uses: Options::device is "" (by subnet), "rdma_en3" (both ranks) or "rdma_en3,rdma_en2".
std::string device_for(const Options& options, int rank) {
  const size_t comma = options.device.find(',');
  if (comma == std::string::npos) return options.device;
  return rank == 0 ? options.device.substr(0, comma) : options.device.substr(comma + 1);
}

// Counts the report's verdict lines.
void count(const std::string& text, Outcome* outcome) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("PASS ", 0) == 0) ++outcome->passed;
    if (line.rfind("FAIL ", 0) == 0) ++outcome->failed;
    if (line.rfind("FAIL preflight: not available", 0) == 0) ++outcome->unavailable;
    if (line.rfind("SKIP ", 0) == 0) ++outcome->skipped;
  }
}

// This rank's own checks: its devices and their limits. *usable: it has a device to try the link with.
std::string local_checks(const Options& options, const Site& site, bool* usable_out) {
  const std::string device = device_for(options, site.rank);
  std::string out = fmt::format("== rank {} (host {}, {}) ==\n", site.rank, host_name(), system_line());
  const ibverbs::PreflightReport report = ibverbs::preflight(site.verbs, site.why_no_verbs);
  out += ibverbs::format_preflight(report);
  const bool usable = std::any_of(report.ports.begin(), report.ports.end(), [&](const ibverbs::PortReport& port) {
    return port.usable && (device.empty() || port.device == device);
  });
  *usable_out = usable;
  // The device the probes would take: the one named, else the first usable.
  std::string probed = device;
  for (const ibverbs::PortReport& port : report.ports) {
    if (probed.empty() && port.usable) probed = port.device;
  }
  const bool apple = site.verbs != nullptr && ibverbs::apple_device(*site.verbs, probed);
  if (options.limits == Options::Limits::kOff) {
    out += "SKIP limits: --no-limits\n";
  } else if (options.limits == Options::Limits::kAuto && apple && usable) {
    out += fmt::format("SKIP limits {}: opt-in on Apple's Thunderbolt (--limits): each probe takes queue pairs and "
                       "registrations up to what tbcoll uses, and Apple's stack has been seen to degrade after many "
                       "such cycles\n",
                       probed);
  } else if (!usable) {
    out += device.empty() || !report.available ? "SKIP limits: no usable device\n"
                                               : fmt::format("SKIP limits: {} is not a usable device here\n", device);
  } else {
    try {
      out += ibverbs::format_limits(ibverbs::probe_limits(*site.verbs, device, options.mode));
    } catch (const Error& error) {
      out += fmt::format("FAIL limits: {}\n", error.what());
    }
  }
  return out;
}

std::vector<size_t> sweep_sizes(const Options& options, size_t max_message) {
  const size_t top = std::min(options.sweep_max, max_message);
  std::vector<size_t> sizes;
  for (size_t bytes = std::max<size_t>(options.sweep_min, 1); bytes < top; bytes *= 2) {
    sizes.push_back(bytes);
    if (bytes == 4096 && top > 4097) sizes.push_back(4097);  // two frames, the second holding one byte
  }
  sizes.push_back(top);
  return sizes;
}

struct RawFigures {
  double one_way_us = 0;
  double one_qp_gbps = 0;
};

// The link between the two ranks with plain verbs: set-up, the verified sweep, latency and bandwidth.
std::string link_checks(const Options& options, const Site& site, const ibverbs::PeerExchange& exchange,
                        RawFigures* figures) {
  const char* mode = ibverbs::mode_name(options.mode);
  const std::string kind = options.mode == ibverbs::Mode::kRc ? "RC" : "UC";
  ibverbs::RawLinkOptions link_options;
  link_options.rank = site.rank;
  link_options.mode = options.mode;
  link_options.device = device_for(options, site.rank);
  link_options.message_timeout_s = options.message_timeout_s;
  link_options.max_message_bytes = std::max(options.sweep_max, options.bandwidth_bytes);
  std::unique_ptr<ibverbs::RawLink> link;
  try {
    link = std::make_unique<ibverbs::RawLink>(site.verbs, site.why_no_verbs, link_options, exchange);
  } catch (const Error& error) {
    return fmt::format("FAIL link ({} queue pairs): {}\nSKIP send sweep, latency, bandwidth: no link\n", mode,
                       error.what());
  }
  std::string out = fmt::format("PASS link: rank 0 {} <-> rank 1 {}, {} queue pairs, path MTU {}\n",
                                site.rank == 0 ? link->device() : link->peer_device(),
                                site.rank == 0 ? link->peer_device() : link->device(), mode, link->mtu_bytes());
  auto hook = [&](const char* phase) {
    if (site.rank == 0 && options.before_phase) options.before_phase(phase);
  };
  const std::vector<size_t> sizes = sweep_sizes(options, link->max_message_bytes());
  hook("sweep");
  const ibverbs::SweepResult sweep = link->sweep(sizes);
  const std::string range = fmt::format("{}..{}", size_text(sizes.front()), size_text(sizes.back()));
  if (sweep.ok) {
    out += fmt::format(
        "PASS send sweep {}: {} sizes, both ranks sending at once, each into a receive of the same size (the same "
        "count of 4 KiB frames), every byte checked\n",
        range, sizes.size());
  } else {
    out += fmt::format("FAIL send sweep at {}: {}\n", size_text(sweep.steps.back().bytes), sweep.failure);
  }
  for (const ibverbs::SweepStep& step : sweep.steps) {
    out += fmt::format("    {:>10} B  {}{}\n", step.bytes, step.ok ? "ok" : "FAILED",
                       step.ok ? fmt::format("  {:.3f} ms", step.seconds * 1e3) : "");
  }
  try {
    hook("latency");
    figures->one_way_us = link->one_way_us(options.latency_bytes, options.round_trips);
    out += fmt::format("PASS latency: {} SEND one way, {} B: {:.2f} us (median of {} round trips / 2)\n", kind,
                       options.latency_bytes, figures->one_way_us, options.round_trips);
  } catch (const Error& error) {
    out += fmt::format("FAIL latency: {}\n", error.what());
  }
  try {
    hook("bandwidth");
    const size_t bytes = std::min(options.bandwidth_bytes, link->max_message_bytes());
    figures->one_qp_gbps = link->bandwidth_gbps(bytes, options.messages, false);
    const double both = link->bandwidth_gbps(bytes, options.messages, true);
    out += fmt::format(
        "PASS bandwidth: one {} queue pair, {} messages x {}: {:.3f} GB/s one way; {:.3f} GB/s per direction both "
        "ways at once\n",
        kind, options.messages, size_text(bytes), figures->one_qp_gbps, both);
  } catch (const Error& error) {
    out += fmt::format("FAIL bandwidth: {}\n", error.what());
  }
  if (figures->one_way_us > 0 && figures->one_qp_gbps > 0) {
    // The transport's cost model takes the link's floors from these knobs (else published Thunderbolt 5 figures).
    out += fmt::format(
        "    cost model: set TBCOLL_IB_LATENCY_US={:.2f} TBCOLL_IB_GBPS={:.2f} alike on every rank of jobs over "
        "this link\n",
        figures->one_way_us, figures->one_qp_gbps);
  }
  hook("zero-copy");  // last: a failure breaks the link, and the floors above are measured by then
  out += ibverbs::format_zero_copy(link->zero_copy_sends());
  return out;
}

double median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

// A 2-rank all_reduce over the transport, checked, and timed against the raw figures.
std::string collective_check(const Options& options, const Site& site, const RawFigures& raw) {
  const std::string name = fmt::format("all_reduce over {} ({})", options.transport, ibverbs::mode_name(options.mode));
  try {
    Config config;
    config.rank = site.rank;
    config.world_size = 2;
    config.store = site.store;
    config.server = site.server;
    config.prefix = site.prefix + "/all_reduce";
    config.transport = options.transport;
    config.timeout_s = options.timeout_s;
    config.knobs["TBCOLL_IB_MODE"] = ibverbs::mode_name(options.mode);
    const std::string device = device_for(options, site.rank);
    if (!device.empty()) config.knobs["TBCOLL_IB_DEVICES"] = device;
    Communicator comm = Communicator::init(config);
    const int peer = 1 - site.rank;
    if (comm.transport_name(peer) != options.transport) {
      return fmt::format("FAIL {}: the ranks talk {}, not {}\n", name, comm.transport_name(peer), options.transport);
    }
    // Sums of small integers are exact in f32: every element is checked.
    auto check = [&](size_t count) {
      std::vector<float> in(count), out(count, -1.0f);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((i % 1000) + 1000 * site.rank);
      comm.all_reduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
      for (size_t i = 0; i < count; ++i) {
        const float want = static_cast<float>(2 * (i % 1000) + 1000);
        if (out[i] != want) {
          throw IoError(fmt::format("element {} of {} is {}, not {}", i, count, out[i], want));
        }
      }
    };
    const size_t big = std::max<size_t>(options.allreduce_bytes / 4, 1);
    if (site.rank == 0 && options.before_phase) options.before_phase("all_reduce");
    check(2);
    check((size_t{1} << 18) + 3);
    check(big);
    float small[2] = {1, 2};
    std::vector<double> times;
    for (int i = 0; i < options.allreduce_iterations + options.allreduce_iterations / 10; ++i) {
      const auto start = Clock::now();
      comm.all_reduce(small, small, 2, DataType::kFloat32, ReduceOp::kMax);
      if (i >= options.allreduce_iterations / 10) {
        times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
      }
    }
    std::vector<float> data(big, 1.0f);
    std::vector<double> big_times;
    for (int i = 0; i < 6; ++i) {
      comm.barrier();
      const auto start = Clock::now();
      comm.all_reduce(data.data(), data.data(), big, DataType::kFloat32, ReduceOp::kMax);
      if (i > 0) big_times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    // Rank 0's figures, on both ranks.
    double figures[2] = {median(times), median(big_times)};
    comm.broadcast(figures, figures, 2, DataType::kFloat64, 0);
    const double small_us = figures[0];
    const double busbw = static_cast<double>(big) * 4 / figures[1] / 1e9;  // 2 ranks: busbw factor 2(n-1)/n = 1
    std::string out = fmt::format("PASS {}: 8 B, 1 MiB + 12 B and {} f32 sums right\n", name, size_text(big * 4));
    out += fmt::format("    8 B all_reduce: {:.2f} us (median of {})", small_us, options.allreduce_iterations);
    if (raw.one_way_us > 0) {
      out += fmt::format(" = {:.2f} x the raw one-way latency (goal on Thunderbolt 5 Macs: at most 2 x)",
                         small_us / raw.one_way_us);
    }
    out += fmt::format("\n    {} all_reduce: busbw {:.3f} GB/s", size_text(big * 4), busbw);
    if (raw.one_qp_gbps > 0) {
      out += fmt::format(" = {:.0f} % of one queue pair's one-way bandwidth (goal: at least 80 %)",
                         100 * busbw / raw.one_qp_gbps);
    }
    return out + "\n";
  } catch (const Error& error) {
    return fmt::format("FAIL {}: {}\n", name, error.what());
  }
}

}  // namespace

Outcome run(const Options& options, const Site& site) {
  if (site.world_size != 1 && site.world_size != 2) {
    throw InvalidArgument(
        fmt::format("tbcoll-rdma-check runs as 1 rank (this host's checks) or 2 (the link between "
                    "them too), not {}",
                    site.world_size));
  }
  if (site.world_size == 2 && (site.rank < 0 || site.rank > 1 || !site.store)) {
    throw InvalidArgument("tbcoll-rdma-check: two ranks need ranks 0 and 1 and a store");
  }
  std::string header = fmt::format("tbcoll-rdma-check {} report (paste all of it into a bug report)\n", site.version);
  header +=
      fmt::format("mode {} ({}), checks on {} rank{}\n", ibverbs::mode_name(options.mode),
                  options.mode == ibverbs::Mode::kUc ? "UC queue pairs, SEND only: Apple's subset" : "RC queue pairs",
                  site.world_size, site.world_size == 1 ? "" : "s");
  bool usable = false;
  const std::string mine = local_checks(options, site, &usable);
  Outcome outcome;
  if (site.world_size == 1) {
    outcome.report = header + mine +
                     "SKIP link, send sweep, latency, bandwidth, all_reduce: one rank (run two: tbcoll-run -n 2, or "
                     "one per host with TBCOLL_ROOT, TBCOLL_RANK and TBCOLL_WORLD_SIZE)\n";
    count(outcome.report, &outcome);
    outcome.report += fmt::format("summary: {} passed, {} failed, {} skipped\nRESULT: {}\n", outcome.passed,
                                  outcome.failed, outcome.skipped, outcome.failed == 0 ? "PASS" : "FAIL");
    return outcome;
  }
  const double exchange_timeout = std::max(options.timeout_s, 3 * options.message_timeout_s) + 60;
  const ibverbs::PeerExchange texts =
      ibverbs::store_exchange(site.store, site.prefix + "/texts", site.rank, 1 - site.rank, exchange_timeout);
  const std::string swapped = texts((usable ? "1" : "0") + mine);
  const bool peer_usable = !swapped.empty() && swapped[0] == '1';
  const std::string theirs = swapped.empty() ? "" : swapped.substr(1);
  const ibverbs::PeerExchange exchange =
      ibverbs::store_exchange(site.store, site.prefix + "/link", site.rank, 1 - site.rank, exchange_timeout);
  RawFigures raw;
  std::string both = "== both ranks ==\n";
  if (usable && peer_usable) {
    both += link_checks(options, site, exchange, &raw);  // the link is closed again before the transport opens one
    both += collective_check(options, site, raw);
  } else {
    both += fmt::format(
        "SKIP link, send sweep, latency, bandwidth, all_reduce: RDMA is not available on {} (see the "
        "preflight above)\n",
        !usable && !peer_usable ? "either rank" : fmt::format("rank {}", usable ? 1 - site.rank : site.rank));
  }
  const std::string& rank0 = site.rank == 0 ? mine : theirs;
  const std::string& rank1 = site.rank == 0 ? theirs : mine;
  std::string report = header + rank0 + rank1 + both;
  count(report, &outcome);
  report += fmt::format("summary: {} passed, {} failed, {} skipped\nRESULT: {}\n", outcome.passed, outcome.failed,
                        outcome.skipped, outcome.failed == 0 ? "PASS" : "FAIL");
  if (site.rank == 0) {
    outcome.report = report;
  } else {
    outcome.report = fmt::format(
        "tbcoll-rdma-check: rank 1 on {}: the report is printed by rank 0 ({} passed, {} "
        "failed)\n",
        host_name(), outcome.passed, outcome.failed);
  }
  return outcome;
}

}  // namespace tbcoll::rdma_check
