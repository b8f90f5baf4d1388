// tbcoll-rdma-check: checks RDMA between two Macs (Thunderbolt 5) or two RoCE/InfiniBand hosts, and prints a
// report to paste into a bug report. See usage() and tools/rdma_check/check.h.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bootstrap/open_store.h"
#include "common/env.h"
#include "tools/rdma_check/check.h"

namespace {

void usage(std::FILE* to) {
  std::fprintf(
      to,
      "usage: tbcoll-rdma-check [--mode uc|rc] [--device NAME] [--limits|--no-limits] [--round-trips N]\n"
      "                         [--bandwidth-bytes B] [--messages N] [--sweep-max B] [--message-timeout S]\n"
      "                         [--allreduce-iterations N] [--allreduce-bytes B]\n"
      "  One rank: this host's devices (port state, GID table, MTU, the IPv4 address behind the GID) and\n"
      "  limits (queue pairs, registrations, outstanding receives; opt-in on Apple's Thunderbolt: --limits).\n"
      "  Two ranks: also the link between them\n"
      "  with plain verbs (a send sweep 4 KiB..16 MiB with every byte checked, latency, bandwidth, and the\n"
      "  transport's zero-copy sends: 512 KiB SENDs straight from registered memory at 16 KiB-aligned offsets,\n"
      "  which TBCOLL_IB_ZERO_COPY=1 turns on on Apple's Thunderbolt once verified) and a 2-rank all_reduce over\n"
      "  the ibverbs transport.\n"
      "    tbcoll-run -n 2 -- tbcoll-rdma-check                      (both ranks on this host)\n"
      "    host A: TBCOLL_ROOT=A:29500 TBCOLL_RANK=0 TBCOLL_WORLD_SIZE=2 tbcoll-rdma-check\n"
      "    host B: TBCOLL_ROOT=A:29500 TBCOLL_RANK=1 TBCOLL_WORLD_SIZE=2 tbcoll-rdma-check\n"
      "  --mode       queue pairs: uc (default; all Apple's Thunderbolt stack offers) or rc (RoCE, InfiniBand)\n"
      "  --device     the RDMA device: NAME for both ranks, or RANK0,RANK1 (a cable's two ends have different\n"
      "               names: rdma_en3,rdma_en2); default: the one on a subnet both ranks' ports share\n"
      "  --limits     probe the device's limits (queue pairs, registrations, outstanding receives), each up to\n"
      "               what tbcoll takes there (its queue pair budget: the device's max_qp, at most 10 on Apple's\n"
      "               Thunderbolt; a registration per link plus the callers' share of max_mr), then free them.\n"
      "               Default: on, but off on Apple's Thunderbolt (librdma, rdma_enN), where it is opt-in and\n"
      "               the receives are not probed (that needs a queue pair looped back to the device itself)\n"
      "  --no-limits  never probe the limits\n"
      "  --skip-without-rdma   exit 77 (a skip to test harnesses) when the only failures are ranks without RDMA\n"
      "  sizes take K/M suffixes. Exit status 0 when every check passed, 1 otherwise, 2 for bad usage.\n");
}

size_t parse_bytes(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  const std::string suffix = end;
  const double scale = suffix.empty() ? 1 : suffix == "K" ? 1024 : suffix == "M" ? 1024.0 * 1024 : -1;
  if (text.empty() || scale < 0 || !(value >= 1) || value * scale > 1e12) {
    throw tbcoll::InvalidArgument(flag + " needs a size like 4096, 64K or 16M, not '" + text + "'");
  }
  return static_cast<size_t>(value * scale);
}

int parse_count(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || value < 1 || value > 100000000) {
    throw tbcoll::InvalidArgument(flag + " needs a whole number from 1, not '" + text + "'");
  }
  return static_cast<int>(value);
}

double parse_seconds(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(value) || value <= 0) {
    throw tbcoll::InvalidArgument(flag + " needs a positive number of seconds, not '" + text + "'");
  }
  return value;
}

}  // namespace

// Two ranks leave in order: rank 0 serves the store, so it goes last, and rank 1 only once rank 0's report is out
// (a launcher that stops the job when a rank exits with a failure must not cut it short).
void leave(const tbcoll::rdma_check::Site& site) {
  const auto deadline = tbcoll::Clock::now() + std::chrono::seconds(30);
  if (site.rank == 0) {
    site.store->set("tbcoll-rdma-check/printed", {1}, deadline);
    site.store->get("tbcoll-rdma-check/done", deadline);
  } else {
    site.store->get("tbcoll-rdma-check/printed", deadline);
    site.store->set("tbcoll-rdma-check/done", {1}, deadline);
  }
}

int main(int argc, char** argv) {
  tbcoll::rdma_check::Options options;
  bool skip_without_rdma = false;
  try {
    const std::string mode = tbcoll::env::get("TBCOLL_IB_MODE");
    if (mode == "rc") options.mode = tbcoll::ibverbs::Mode::kRc;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw tbcoll::InvalidArgument("missing value after " + arg);
        return argv[++i];
      };
      if (arg == "--mode") {
        const std::string text = value();
        if (text != "uc" && text != "rc") throw tbcoll::InvalidArgument("--mode takes uc or rc, not '" + text + "'");
        options.mode = text == "rc" ? tbcoll::ibverbs::Mode::kRc : tbcoll::ibverbs::Mode::kUc;
      } else if (arg == "--device") {
        options.device = value();
        const size_t comma = options.device.find(',');
        if (options.device.empty() || comma == 0 || comma + 1 == options.device.size() ||
            options.device.find(',', comma + 1) != std::string::npos) {
          throw tbcoll::InvalidArgument("--device takes NAME or RANK0,RANK1, not '" + options.device + "'");
        }
      } else if (arg == "--no-limits") {
        options.limits = tbcoll::rdma_check::Options::Limits::kOff;
      } else if (arg == "--limits") {
        options.limits = tbcoll::rdma_check::Options::Limits::kOn;
      } else if (arg == "--skip-without-rdma") {
        skip_without_rdma = true;
      } else if (arg == "--round-trips") {
        options.round_trips = parse_count(arg, value());
      } else if (arg == "--bandwidth-bytes") {
        options.bandwidth_bytes = parse_bytes(arg, value());
      } else if (arg == "--messages") {
        options.messages = parse_count(arg, value());
      } else if (arg == "--sweep-max") {
        options.sweep_max = parse_bytes(arg, value());
      } else if (arg == "--message-timeout") {
        options.message_timeout_s = parse_seconds(arg, value());
      } else if (arg == "--allreduce-iterations") {
        options.allreduce_iterations = parse_count(arg, value());
      } else if (arg == "--allreduce-bytes") {
        options.allreduce_bytes = parse_bytes(arg, value());
      } else if (arg == "-h" || arg == "--help") {
        usage(stdout);
        return 0;
      } else {
        throw tbcoll::InvalidArgument("unknown argument " + arg);
      }
    }
  } catch (const tbcoll::Error& error) {
    std::fprintf(stderr, "tbcoll-rdma-check: %s\n", error.what());
    usage(stderr);
    return 2;
  }
  try {
    const tbcoll::Config config = tbcoll::Config::from_env();
    options.timeout_s = config.timeout_s;
    tbcoll::rdma_check::Site site;
    site.verbs = tbcoll::ibverbs::system_verbs(&site.why_no_verbs);
    site.rank = config.rank;
    site.world_size = config.world_size;
    site.version = TBCOLL_VERSION;
    if (site.world_size == 2) {
      const auto opened = tbcoll::bootstrap::open_store(
          config, tbcoll::Clock::now() + std::chrono::seconds(static_cast<long>(std::min(config.timeout_s, 1e6))));
      site.store = opened.store;
      site.server = opened.server;
    }
    const tbcoll::rdma_check::Outcome outcome = tbcoll::rdma_check::run(options, site);
    std::fputs(outcome.report.c_str(), stdout);
    std::fflush(stdout);
    if (site.world_size == 2) leave(site);
    if (outcome.failed == 0) return 0;
    return skip_without_rdma && outcome.unavailable == outcome.failed ? 77 : 1;
  } catch (const tbcoll::Error& error) {
    std::fprintf(stderr, "tbcoll-rdma-check: %s\n", error.what());
    return 1;
  }
}
