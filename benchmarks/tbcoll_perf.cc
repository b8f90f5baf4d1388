// tbcoll-perf: nccl-tests-style benchmark of tbcoll collectives, plus the raw TCP floor between the same
// processes (and the shared-memory or raw verbs floors where the ranks talk shm or ibverbs). Run under a
// launcher: tbcoll-run -n 2 tbcoll-perf -b 8 -e 64M -f 2 --pingpong
//
// time = median over iterations of the slowest rank's time for that iteration (us); algbw = size / time;
// busbw = algbw x nccl-tests' factor (all_reduce 2(n-1)/n, all_gather (n-1)/n, broadcast 1). size is the
// per-rank buffer of all_reduce/broadcast and the gathered total of all_gather, as in nccl-tests (all_to_all: a
// rank's whole send buffer; gather/scatter: the root's; their factor (n-1)/n). all_to_allv runs equal counts.
// Every size is checked against a reference first (#wrong: elements that differ, summed over ranks; see
// perf_check.h).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "benchmarks/perf_calls.h"
#include "benchmarks/perf_check.h"
#include "benchmarks/pingpong.h"
#include "benchmarks/verbs_floors.h"
#include "bootstrap/open_store.h"
#include "algorithms/registry.h"
#include "reduce/reduce.h"
#include "tbcoll/tbcoll.hpp"
#include "tbcoll/transport.hpp"

namespace {

using tbcoll::DataType;
using tbcoll::ReduceOp;
using tbcoll::bench::Buffers;
using tbcoll::bench::Collective;
using tbcoll::bench::Measured;
using tbcoll::bench::Options;
using tbcoll::bench::is_reduction;
using tbcoll::bench::measure;


size_t parse_size(const std::string& text) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  std::string suffix = end;
  double scale = suffix.empty() || suffix == "B" ? 1
                 : suffix == "K" || suffix == "KB" || suffix == "KiB" ? 1024
                 : suffix == "M" || suffix == "MB" || suffix == "MiB" ? 1024.0 * 1024
                 : suffix == "G" || suffix == "GB" || suffix == "GiB" ? 1024.0 * 1024 * 1024
                 : -1;
  if (scale < 0 || !(value >= 0)) throw tbcoll::InvalidArgument("bad size " + text + " (use 8, 1K, 64M, 1G)");
  constexpr double kMaxBytes = 1ull << 40;  // 1 TiB: beyond any buffer this benchmark can allocate
  if (value * scale > kMaxBytes) throw tbcoll::InvalidArgument("size " + text + " is beyond 1 TiB");
  return static_cast<size_t>(value * scale);
}

// A whole integer or number, or InvalidArgument naming the flag (atoi would take "2x" as 2).
long long parse_integer(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    throw tbcoll::InvalidArgument(flag + " needs an integer, not '" + text + "'");
  }
  return value;
}

double parse_real(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(value)) {
    throw tbcoll::InvalidArgument(flag + " needs a number, not '" + text + "'");
  }
  return value;
}

int parse_int(const std::string& flag, const std::string& text) {
  const long long value = parse_integer(flag, text);
  if (value < INT_MIN || value > INT_MAX) throw tbcoll::InvalidArgument(flag + " is out of range: " + text);
  return static_cast<int>(value);
}

void usage() {
  std::printf(
      "usage: tbcoll-perf [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-d DTYPE] [-o OP] [-c 0|1]\n"
      "                   [--collective all_reduce|all_gather|reduce_scatter|reduce|broadcast|all_to_all|\n"
      "                       all_to_allv|gather|scatter] [-r ROOT] [--transport T]\n"
      "                   [--algo A] [--register] [--version]\n"
      "                   [--csv FILE] [--pingpong [--no-tcp-floor] [--floor-round-trips N]\n"
      "                   [--floor-messages N]] [--explain | --explain-only]\n"
      "                   [--compare all|A,B,...,auto[,measured] [--rounds N] [--budget SECONDS]]\n"
      "                   [--compute-us US] [--skew-us US [--skew-rank R]] [--background N]\n"
      "  sizes take K/M/G suffixes; dtypes: i8 u8 i32 u32 i64 u64 f16 bf16 f32 f64; ops: sum prod max min avg\n"
      "  -n: timed iterations per size (default: by size, 64 MiB / size from 20 to 5000); -w: untimed ones before\n"
      "  (default: a tenth of them, 5 to 100); -c 0|1: check every size's results (1, the default), as nccl-tests;\n"
      "  -c NAME is --collective NAME; collectives also by TBCOLL_ALGO's names (allreduce, allgather, ...)\n"
      "  --register: each size's buffers are registered with the transports first (Communicator::register_memory,\n"
      "  as ncclCommRegister: ibverbs then sends from them without a copy)\n"
      "  --explain prints per size the cost model's predicted time of every algorithm that can run and the one the\n"
      "  tuner picks (with the alpha/beta it used); --explain-only prints that without measuring.\n"
      "  --algo takes TBCOLL_ALGO's forms: a name, or collective:name[,collective:name...]. Algorithms:\n");
  const auto devices = tbcoll::transport::available_devices();
  for (tbcoll::OpKind kind : tbcoll::algo::collectives()) {
    std::string names;
    for (const auto& device : devices) {
      for (const auto& fast : device->fast_path_algorithms()) {
        if (fast.kind == kind) names += " " + fast.name + " (" + device->name() + ")";
      }
    }
    for (const auto& row : tbcoll::algo::algorithms_for(kind)) names += std::string(" ") + row.name;
    std::printf("    %-15s%s\n", tbcoll::op_kind_name(kind), names.c_str());
  }
  std::printf("  --compare: the algorithms named (all: every one of the collective, and auto: the tuner's choice;\n"
              "    measured: auto with TBCOLL_TUNER=measure, the model's shortlist timed by its first calls;\n"
              "    ring@2: a twin of ring, the noise between two communicators running one algorithm;\n"
              "    auto/wait=spin: auto with TBCOLL_WAIT=spin, a variant with knobs of its own, NAME=VALUE for\n"
              "    TBCOLL_NAME, compared as a forced algorithm)\n"
              "    measured in turns in one run, each on a communicator forced to it, out of place; per size up to\n"
              "    --rounds N (5) rounds, cut so each algorithm's timed calls take about --budget SECONDS (2);\n"
              "    x/b is paired by round: the median over rounds of x's batch over the best forced one's\n"
              "    in that round\n");
  std::printf("  --pingpong: the raw floors between ranks 0 and 1 after the table: TCP, and shared memory or plain verbs\n"
              "    (UC SEND latency, one queue pair's bandwidth one way and both ways) when they talk shm or ibverbs;\n"
              "    --floor-round-trips N (10000) and --floor-messages N (256 of 1 MiB) size the verbs floors;\n"
              "    --no-tcp-floor leaves the TCP floor out\n");
  std::printf("  --compute-us US: every rank works (spins) US microseconds before each call; --skew-us US: rank\n"
              "    --skew-rank (the last) US more, arriving late; --background N: N threads spin in rank 0's process\n"
              "    for the whole run. With any of them, a call's time runs from the last rank's arrival to the last\n"
              "    rank's end (the ranks' clocks matched to rank 0's by a ping-pong): what an engine waits for\n"
              "    beyond its own work\n");
  std::printf("  launch under tbcoll-run (or mpirun with TBCOLL_ROOT set)\n");
}

// A usage error: one line and the way to the help, not the whole help.
[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "tbcoll-perf: %s (tbcoll-perf --help lists the options)\n", what.c_str());
  std::exit(2);
}

// all_reduce, or TBCOLL_ALGO's spelling of it (allreduce).
std::string collective_name(const std::string& name) {
  for (const char* known : {"all_reduce", "all_gather", "reduce_scatter", "reduce", "broadcast", "all_to_all",
                            "all_to_allv", "gather", "scatter"}) {
    std::string joined = known;
    joined.erase(std::remove(joined.begin(), joined.end(), '_'), joined.end());
    if (name == known || name == joined) return known;
  }
  if (name == "bcast") return "broadcast";
  return name;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw tbcoll::InvalidArgument("missing value after " + arg);
      return argv[++i];
    };
    if (arg == "-b") o.min_bytes = parse_size(value());
    else if (arg == "-e") o.max_bytes = parse_size(value());
    else if (arg == "-f") o.factor = parse_real(arg, value());
    else if (arg == "-n") o.iterations = parse_int(arg, value());
    else if (arg == "-w") o.warmup = parse_int(arg, value());
    else if (arg == "-d") o.dtype = tbcoll::parse_dtype(value());
    else if (arg == "-o") o.op = tbcoll::parse_op(value());
    else if (arg == "-c") {
      const std::string text = value();
      if (text == "0" || text == "1") o.check = text == "1";  // nccl-tests' -c: check
      else o.collective = collective_name(text);
    } else if (arg == "--collective") o.collective = collective_name(value());
    else if (arg == "--version") {
      std::printf("tbcoll-perf %s\n", TBCOLL_VERSION);
      std::exit(0);
    }
    else if (arg == "-r") o.root = parse_int(arg, value());
    else if (arg == "--transport") o.transport = value();
    else if (arg == "--algo") o.algo = value();
    else if (arg == "--csv") o.csv = value();
    else if (arg == "--pingpong") o.pingpong = true;
    else if (arg == "--register") o.register_memory = true;
    else if (arg == "--no-tcp-floor") o.tcp_floor = false;
    else if (arg == "--floor-round-trips") o.floor_round_trips = parse_int(arg, value());
    else if (arg == "--floor-messages") o.floor_messages = parse_int(arg, value());
    else if (arg == "--compare") o.compare = value();
    else if (arg == "--rounds") o.rounds = parse_int(arg, value());
    else if (arg == "--budget") o.budget_s = parse_real(arg, value());
    else if (arg == "--compute-us") o.engine.compute_us = parse_real(arg, value());
    else if (arg == "--skew-us") o.engine.skew_us = parse_real(arg, value());
    else if (arg == "--skew-rank") o.engine.skew_rank = parse_int(arg, value());
    else if (arg == "--background") o.engine.background = parse_int(arg, value());
    else if (arg == "--explain")
      o.explain = true;
    else if (arg == "--explain-only")
      o.explain = o.explain_only = true;
    else if (arg == "-h" || arg == "--help") {
      usage();
      std::exit(0);
    } else {
      usage_error("unknown argument " + arg);
    }
  }
  if (o.factor <= 1 || o.iterations < 0 || o.warmup < -1 || o.min_bytes < 1 || o.min_bytes > o.max_bytes) {
    throw tbcoll::InvalidArgument("need -f > 1, -n >= 1 (0: by size), -w >= 0, 1 <= -b <= -e");
  }
  if (!o.check && !o.compare.empty()) throw tbcoll::InvalidArgument("--compare always checks: -c 0 does not apply");
  if (o.rounds < 1 || !(o.budget_s > 0)) throw tbcoll::InvalidArgument("need --rounds >= 1 and --budget > 0");
  if (!o.compare.empty() && (o.pingpong || o.explain || !o.algo.empty())) {
    throw tbcoll::InvalidArgument("--compare runs alone (without --pingpong, --explain or --algo)");
  }
  if (o.engine.compute_us < 0 || o.engine.skew_us < 0 || o.engine.background < 0 || o.engine.skew_rank < -1) {
    throw tbcoll::InvalidArgument("need --compute-us, --skew-us, --background >= 0 and --skew-rank >= 0");
  }
  if (o.floor_round_trips < 1 || o.floor_messages < 1) {
    throw tbcoll::InvalidArgument("need --floor-round-trips >= 1 and --floor-messages >= 1");
  }
  if (o.collective == "all_reduce") {
    o.kind = Collective::kAllReduce;
  } else if (o.collective == "all_gather") {
    o.kind = Collective::kAllGather;
  } else if (o.collective == "reduce_scatter") {
    o.kind = Collective::kReduceScatter;
  } else if (o.collective == "reduce") {
    o.kind = Collective::kReduce;
  } else if (o.collective == "broadcast") {
    o.kind = Collective::kBroadcast;
  } else if (o.collective == "all_to_all" || o.collective == "all_to_allv") {
    o.kind = Collective::kAllToAll;
    o.per_peer_counts = o.collective == "all_to_allv";
  } else if (o.collective == "gather") {
    o.kind = Collective::kGather;
  } else if (o.collective == "scatter") {
    o.kind = Collective::kScatter;
  } else {
    throw tbcoll::InvalidArgument("unknown collective " + o.collective);
  }
  return o;
}

double bus_factor(const std::string& collective, int n) {
  if (collective == "all_reduce") return 2.0 * (n - 1) / n;
  if (collective == "all_gather" || collective == "reduce_scatter" || collective == "all_to_all" ||
      collective == "all_to_allv" || collective == "gather" || collective == "scatter") {
    return static_cast<double>(n - 1) / n;
  }
  return 1.0;
}

// "#   model 1 KiB: direct 12.3 us, ring 45.6 us, twoshot (fast path: its own sizes); chosen direct (by the model)"
void print_explanation(const tbcoll::Communicator& comm, const std::string& collective, size_t bytes) {
  const tbcoll::Communicator::Explanation why = comm.explain(collective, bytes);
  std::string line;
  for (const auto& algorithm : why.algorithms) {
    if (!algorithm.cannot_run.empty()) continue;  // only those that can run the call
    char text[160];
    if (algorithm.predicted_us >= 0) {
      std::snprintf(text, sizeof(text), "%s %.1f us", algorithm.name.c_str(), algorithm.predicted_us);
    } else {
      std::snprintf(text, sizeof(text), "%s (%s)", algorithm.name.c_str(),
                    algorithm.fast_path ? "fast path: its own sizes" : "no cost: size ranges");
    }
    line += (line.empty() ? "" : ", ") + std::string(text);
  }
  // Rows with an empty default range (registry.cc's forced_only) are priced but never picked on their own.
  const char* model = "cheapest by the model of the rows it picks on its own (the others only when forced)";
  std::printf("#   predicted %zu B: %s; chosen %s (%s)\n", bytes, line.c_str(), why.chosen.c_str(),
              !why.measured.empty() ? "TBCOLL_TUNER=measure: the fastest of the model's shortlist"
              : why.model_decides   ? model
                                    : "forced, a fast path in its size range, or size ranges");
  if (!why.measured.empty()) std::printf("#   measured %zu B: %s\n", bytes, why.measured.c_str());
}

// The widest algorithm name the collective may print, so long names keep the columns aligned.
int algo_width(const std::string& collective) {
  size_t width = 7;
  for (tbcoll::OpKind kind : tbcoll::algo::collectives()) {
    if (collective != tbcoll::op_kind_name(kind)) continue;
    for (const auto& row : tbcoll::algo::algorithms_for(kind)) width = std::max(width, std::strlen(row.name));
    for (const auto& device : tbcoll::transport::available_devices()) {
      for (const auto& fast : device->fast_path_algorithms()) {
        if (fast.kind == kind) width = std::max(width, fast.name.size());
      }
    }
  }
  return static_cast<int>(width);
}

// nccl-tests' two column groups, labelled.
void print_header(int width) {
  const int left = 12 + 1 + 12 + 1 + 6 + 1 + 6 + 1 + width;
  std::printf("#%*s %-34s %-34s\n", left - 1, "", "          out-of-place", "          in-place");
  std::printf("#%11s %12s %6s %6s %*s %9s %8s %8s %6s %9s %8s %8s %6s\n", "size", "count", "type", "redop", width,
              "algo", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::printf("#%11s %12s %6s %6s %*s %9s %8s %8s %6s %9s %8s %8s %6s\n", "(B)", "(elements)", "", "", width, "",
              "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

std::string wrong_text(long long wrong) { return wrong < 0 ? "N/A" : std::to_string(wrong); }

// The 8 B figure next to the floor it is bounded by, measured in the same run.
void print_small_against_floor(const char* collective, double small_us, const char* floor_name, double floor_us,
                               const char* bound) {
  if (small_us <= 0 || floor_us <= 0) return;
  std::printf("# 8 B %s %.2f us out of place: %.2fx the %s (%.3f us; %s)\n", collective, small_us,
              small_us / floor_us, floor_name, floor_us, bound);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const tbcoll::Error& error) {
    usage_error(error.what());
  }
  try {
    tbcoll::Config config = tbcoll::Config::from_env();
    if (!o.transport.empty()) config.transport = o.transport;
    if (!o.algo.empty()) config.algo = o.algo;
    std::unique_ptr<tbcoll::bench::BackgroundLoad> load;
    if (o.engine.background > 0 && config.rank <= 0) load = std::make_unique<tbcoll::bench::BackgroundLoad>(o.engine.background);
    if (!o.compare.empty()) return tbcoll::bench::run_compare(o, config) == 0 ? 0 : 1;
    // --pingpong over ibverbs measures the raw verbs floors once the communicator is gone: the ranks meet through
    // the store then, so this program holds it.
    if (o.pingpong && config.world_size > 1) {
      const auto opened = tbcoll::bootstrap::open_store(config, tbcoll::Clock::now() + std::chrono::seconds(60));
      config.store = opened.store;
      config.server = opened.server;
    }
    tbcoll::bench::CollectiveFigures figures;
    auto comm = tbcoll::Communicator::init(config);
    if (o.engine.active()) o.clock_offset_us = tbcoll::bench::clock_offset_us(comm);
    const int n = comm.size();
    const bool lead = comm.rank() == 0;
    const size_t es = tbcoll::dtype_size(o.dtype);
    if (o.root < 0 || o.root >= n) {
      throw tbcoll::InvalidArgument("-r " + std::to_string(o.root) + ": root out of range for " +
                                    std::to_string(n) + " ranks");
    }
    const int width = algo_width(o.collective);

    std::FILE* csv = nullptr;
    if (lead && !o.csv.empty()) {
      csv = std::fopen(o.csv.c_str(), "w");
      if (csv == nullptr) {
        throw tbcoll::InvalidArgument("--csv " + o.csv + ": cannot open for writing: " + std::strerror(errno));
      }
      std::fprintf(csv,
                   "collective,ranks,transport,algo,size,count,type,redop,inplace,median_us,mean_us,algbw,busbw,wrong,"
                   "emulation\n");
    }
    if (lead) {
      const std::string iterations = o.iterations > 0 ? std::to_string(o.iterations) : "by size";
      const std::string warmup = o.warmup >= 0 ? std::to_string(o.warmup) : "by size";
      std::printf("# tbcoll-perf %s: %s, %d ranks, transport %s, dtype %s, op %s, %s iterations (+%s warm-up)%s\n",
                  TBCOLL_VERSION, o.collective.c_str(), n, n > 1 ? comm.transport_name(1).c_str() : "self",
                  tbcoll::to_string(o.dtype).c_str(), tbcoll::to_string(o.op).c_str(), iterations.c_str(),
                  warmup.c_str(), o.check ? "" : ", results not checked (-c 0)");
      std::printf("# link emulation: %s\n", comm.link_emulation().c_str());
      if (o.explain) std::printf("# cost model: %s\n", comm.explain(o.collective, o.min_bytes).model.c_str());
      if (o.engine.active()) {
        std::printf("# engine conditions: %s\n", o.engine.describe(n).c_str());
        std::printf("# time = median over iterations of the time from the last rank's arrival to the last rank's end (us)\n");
      } else {
        std::printf("# time = median over iterations of the slowest rank (us)\n");
      }
      print_header(width);
    }
    long long total_wrong = 0;
    double busbw_sum = 0, small_us = 0;
    int busbw_count = 0;
    size_t rows = 0, last_count = 0;
    for (double size = static_cast<double>(o.min_bytes); size <= static_cast<double>(o.max_bytes) * 1.0001;
         size *= o.factor) {
      size_t total = static_cast<size_t>(size);
      // nccl-tests sizes: the gathered total (all_gather), the scattered input (reduce_scatter), else the buffer.
      const bool per_block = tbcoll::bench::sized_per_block(o);
      size_t count = per_block ? total / es / n : total / es;
      if (count == 0 || count == last_count) continue;  // -f close to 1: each count once
      last_count = count;
      ++rows;
      size_t bytes = per_block ? count * es * n : count * es;
      if (o.explain_only) {
        if (lead) print_explanation(comm, o.collective, bytes);
        continue;
      }
      Buffers b;
      tbcoll::bench::size_buffers(o, n, count, b);
      tbcoll::MemoryRegistration registered[2];
      if (o.register_memory) {
        if (!b.send.empty()) registered[0] = comm.register_memory(b.send.data(), b.send.size());
        if (!b.recv.empty()) registered[1] = comm.register_memory(b.recv.data(), b.recv.size());
        if (lead && rows == 1) {
          std::printf("# --register: the buffers are registered with %d transport(s)\n",
                      std::max(registered[0].transports(), registered[1].transports()));
        }
      }
      Measured out = measure(comm, o, b, count, false);
      Measured in = measure(comm, o, b, count, true);
      total_wrong += std::max(out.wrong, 0LL) + std::max(in.wrong, 0LL);
      if (!lead) continue;
      const std::string algo = comm.algorithm(o.collective, bytes);
      double algbw_out = bytes / out.median_us / 1e3, algbw_in = bytes / in.median_us / 1e3;
      double factor = bus_factor(o.collective, n);
      if (o.kind == Collective::kAllReduce && n == 2 && bytes == 8) figures.all_reduce_8b_us = out.median_us;
      if (bytes == 8) small_us = out.median_us;
      busbw_sum += algbw_out * factor + algbw_in * factor;
      busbw_count += 2;
      if (o.kind == Collective::kAllReduce && n == 2 && bytes == (size_t{16} << 20)) {
        figures.all_reduce_16m_busbw = algbw_out * factor;
      }
      std::printf("%12zu %12zu %6s %6s %*s %9.2f %8.3f %8.3f %6s %9.2f %8.3f %8.3f %6s\n", bytes, count,
                  tbcoll::to_string(o.dtype).c_str(), is_reduction(o.collective) ? tbcoll::to_string(o.op).c_str() : "none",
                  width, algo.c_str(), out.median_us, algbw_out, algbw_out * factor, wrong_text(out.wrong).c_str(),
                  in.median_us, algbw_in, algbw_in * factor, wrong_text(in.wrong).c_str());
      if (o.engine.active()) {
        std::printf("#   per iteration, work included: %.2f us out of place, %.2f us in place\n", out.per_iteration_us,
                    in.per_iteration_us);
      }
      if (o.explain) print_explanation(comm, o.collective, bytes);
      std::fflush(stdout);
      if (csv) {
        for (int place = 0; place < 2; ++place) {
          const Measured& m = place ? in : out;
          double algbw = bytes / m.median_us / 1e3;
          std::fprintf(csv, "%s,%d,%s,%s,%zu,%zu,%s,%s,%d,%.3f,%.3f,%.4f,%.4f,%lld,\"%s\"\n", o.collective.c_str(), n,
                       n > 1 ? comm.transport_name(1).c_str() : "self", algo.c_str(), bytes, count,
                       tbcoll::to_string(o.dtype).c_str(),
                       is_reduction(o.collective) ? tbcoll::to_string(o.op).c_str() : "none", place, m.median_us,
                       m.mean_us, algbw, algbw * factor, m.wrong, comm.link_emulation().c_str());
        }
      }
    }
    if (csv != nullptr && std::fclose(csv) != 0) {
      throw tbcoll::IoError("--csv " + o.csv + ": writing failed: " + std::strerror(errno));
    }
    if (rows == 0) {
      throw tbcoll::InvalidArgument("no size between -b and -e holds a whole element per rank: nothing measured");
    }
    if (lead && o.check) std::printf("# Out of bounds values : %lld %s\n", total_wrong, total_wrong == 0 ? "OK" : "WRONG");
    if (lead && !o.check) std::printf("# Out of bounds values : N/A (not checked, -c 0)\n");
    if (lead && busbw_count > 0) {
      std::printf("# Avg bus bandwidth    : %.3f GB/s (mean over %d sizes, out of place and in place)\n",
                  busbw_sum / busbw_count, busbw_count / 2);
    }
    std::fflush(stdout);
    // The shm floors run between ranks 0 and 1 when they share memory: rank 0 decides for everyone, since every
    // rank takes part in the floors' collectives (ranks elsewhere see another transport to rank 0).
    int32_t shm_floors = o.pingpong && n >= 2 && lead && comm.transport_name(1) == "shm" ? 1 : 0;
    if (o.pingpong && n >= 2) comm.broadcast(&shm_floors, &shm_floors, 1, DataType::kInt32, 0);
    if (lead && o.pingpong && n >= 2) {  // the floors take seconds: say so before the wait
      std::printf("# measuring the raw floors between ranks 0 and 1 (%s; a few seconds each) ...\n",
                  shm_floors != 0 ? "shared memory, then TCP" : "TCP");
      std::fflush(stdout);
    }
    if (shm_floors != 0) {
      double floor_us = tbcoll::bench::raw_shm_floor_us(comm);
      if (lead) {
        std::printf("# raw shared-memory floor between ranks 0 and 1: cache-line hand-off one way %.3f us "
                    "(spinning, mean of 200000 round trips)\n", floor_us);
        print_small_against_floor(o.collective.c_str(), small_us, "shared-memory hand-off one way", floor_us,
                                  "one call alone waits at least one hand-off; back-to-back calls in a loop overlap "
                                  "theirs, so a loop's median can fall below it");
      }
      const double limit_us = n == 2 ? tbcoll::bench::raw_shm_all_reduce_us(comm, 10000) : 0;
      if (lead && limit_us > 0) {
        std::printf("# hand-written 2-rank 8 B all-reduce through shared memory (flag + copy + add, no checks): "
                    "%.3f us (median of 10000 calls, the slower rank's; the fastest of a release or seq_cst "
                    "flag, with or without the next line taken exclusive)\n",
                    limit_us);
        if (o.collective == "all_reduce") {
          print_small_against_floor("all_reduce", small_us, "hand-written limit", limit_us, "the same run");
        }
      }
      for (size_t bytes : {size_t{64} << 10, size_t{1} << 20, size_t{16} << 20}) {
        double exchange = tbcoll::bench::raw_shm_exchange_gbps(comm, bytes);
        if (lead) {
          std::printf("# raw shared-memory copy exchange, the data movement of a 2-rank two-shot all-reduce of %zu "
                      "KiB without reducing: %.2f GB/s busbw-equivalent\n", bytes >> 10, exchange);
        }
      }
      for (size_t bytes : {size_t{1} << 20, size_t{16} << 20}) {
        double ceiling = tbcoll::bench::raw_shm_stream_gbps(comm, bytes);
        if (lead) {
          std::printf("# raw shared-memory streaming, stores on one core and loads on the other, both ways at once, "
                      "%zu KiB each way: %.2f GB/s per direction (the ceiling of a 2-rank all-reduce's busbw)\n",
                      bytes >> 10, ceiling);
        }
      }
    }
    if (o.pingpong && o.tcp_floor && n >= 2) {
      tbcoll::bench::PingPongResult floor = tbcoll::bench::raw_tcp_floor(comm);
      if (lead) {
        std::printf("# raw TCP floor between ranks 0 and 1 (busy-poll, TCP_NODELAY, same processes):\n");
        std::printf("#   one-way latency, median of %d round trips: 8 B %.2f us, 1 KiB %.2f us\n", floor.round_trips,
                    floor.one_way_8b_us, floor.one_way_1k_us);
        std::printf("#   one-way latency, receiver blocking in poll(): 8 B %.2f us\n", floor.one_way_8b_blocking_us);
        std::printf("#   single-stream bandwidth: %.2f GB/s with 1 MiB buffers, %.2f GB/s with 64 MiB buffers"
                    " (%zu MiB each)\n", floor.stream_gbps, floor.stream_large_gbps, floor.stream_bytes >> 20);
        std::printf("#   both directions at once (a 2-rank all-reduce's traffic), per direction: %.2f GB/s with 1 MiB"
                    " buffers, %.2f GB/s with 64 MiB buffers\n", floor.bidir_gbps, floor.bidir_large_gbps);
        const bool one_way = o.kind == Collective::kBroadcast || o.kind == Collective::kGather ||
                             o.kind == Collective::kScatter || o.kind == Collective::kReduce;
        if (comm.transport_name(1) == "tcp" && one_way) {
          print_small_against_floor(o.collective.c_str(), small_us, "TCP one-way 8 B (busy-poll)", floor.one_way_8b_us,
                                    "a rooted call's data goes one way, one message per peer");
        } else if (comm.transport_name(1) == "tcp") {
          print_small_against_floor(o.collective.c_str(), small_us, "TCP round trip (twice the busy-poll one-way 8 B)",
                                    2 * floor.one_way_8b_us, "a call waits for its peer's message and its answer");
        }
      }
    }
    // The verbs floors when ranks 0 and 1 talk ibverbs: rank 0 decides for everyone (as for the shm floors).
    int32_t verbs_floors = o.pingpong && n >= 2 && lead && comm.transport_name(1) == "ibverbs" ? 1 : 0;
    if (o.pingpong && n >= 2) comm.broadcast(&verbs_floors, &verbs_floors, 1, DataType::kInt32, 0);
    // Every rank leaves together: a rank exiting 1 first would get the launcher to stop rank 0 before it printed.
    comm.barrier();
    if (verbs_floors != 0) {
      const int rank = comm.rank();
      { tbcoll::Communicator closing = std::move(comm); }  // its queue pairs and device context go first
      tbcoll::bench::print_verbs_floors(config.store, rank, n, config.timeout_s, figures, o.floor_round_trips,
                                        o.floor_messages);
      tbcoll::bench::leave_together(config.store, rank, n, config.timeout_s);
    }
    return total_wrong == 0 ? 0 : 1;
  } catch (const tbcoll::Error& error) {
    std::fprintf(stderr, "tbcoll-perf: %s\n", error.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "tbcoll-perf: out of memory for the buffers (lower -e)\n");
    return 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "tbcoll-perf: %s\n", error.what());
    return 1;
  }
}
