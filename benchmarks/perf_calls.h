// tbcoll-perf's pieces shared by its plain table (tbcoll_perf.cc) and its side-by-side comparison of algorithms
// (perf_compare.cc): the options, the buffers, one call of the benchmarked collective, and a checked, timed
// batch of calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "benchmarks/perf_check.h"
#include "benchmarks/perf_engine.h"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll::bench {

struct Options {
  size_t min_bytes = 8;
  size_t max_bytes = 64 << 20;
  double factor = 2;
  int iterations = 0;  ///< -n; 0: by size (iterations_for)
  int warmup = -1;     ///< -w; -1: by size (warmup_for)
  bool check = true;   ///< -c 0: no result checks (nccl-tests' -c)
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::string collective = "all_reduce";
  Collective kind = Collective::kAllReduce;
  std::string transport;
  std::string algo;
  std::string csv;
  int root = 0;
  bool pingpong = false;
  bool register_memory = false;   ///< --register: each size's buffers registered (Communicator::register_memory)
  bool tcp_floor = true;          ///< --pingpong's raw TCP floor (--no-tcp-floor: not)
  int floor_round_trips = 10000;  ///< of the verbs floors' latency
  int floor_messages = 256;       ///< per direction, of the verbs floors' bandwidth runs (1 MiB each)
  bool per_peer_counts = false;  // -c all_to_allv: all_to_all's blocks, through all_to_allv
  bool explain = false;       // --explain: the cost model's prediction per size next to the measurement
  bool explain_only = false;  // --explain-only: the predictions alone, nothing measured
  std::string compare;        // --compare: algorithms measured side by side in one run (perf_compare.cc)
  int rounds = 5;             // --rounds: of --compare, each algorithm's turns per size
  double budget_s = 2;        // --budget: of --compare, seconds per size and algorithm at most (timed calls)
  EngineConditions engine;    // --compute-us, --skew-us, --skew-rank, --background (perf_engine.h)
  double clock_offset_us = 0;  // engine conditions: this rank's clock minus rank 0's (set once connected)
};

struct Buffers {
  std::vector<uint8_t> send, recv;
  std::vector<size_t> counts, displs;  // all_to_allv: count per peer, packed
};

/// One call of the benchmarked collective; in place uses recv for both sides.
void call(Communicator& comm, const Options& o, Buffers& b, size_t count, bool in_place);
bool is_reduction(const std::string& collective);

struct Measured {
  double median_us = 0;
  double mean_us = 0;
  long long wrong = 0;
  /// Under engine conditions: the whole loop's time per call, its busy work included (the last rank's end of the
  /// last call minus the first rank's start of the first, over the calls): what an engine's throughput sees.
  double per_iteration_us = 0;
};

/// Timed iterations at this size: -n, else as nccl-tests' and OSU's benches scale them, many for small messages
/// (whose time is a few microseconds: 20 of them measure noise) and few for large ones: 64 MiB / bytes, from 20
/// to 5000.
int iterations_for(const Options& o, size_t bytes);
/// Untimed calls before them: -w, else a tenth of the iterations, from 5 to 100.
int warmup_for(const Options& o, size_t bytes);

/// nccl-tests sizes: whether a size is the gathered total (all_gather, gather, all_to_all) or the scattered
/// input (reduce_scatter, scatter), count elements per rank's block; else the buffer.
bool sized_per_block(const Options& o);

/// A checked call (unless !check_first or -c 0), warmup_for() more, then `iterations` timed ones
/// (iterations_for() when < 1), their result checked too out of place (unless -c 0: wrong is then -1). Per
/// iteration the slowest rank's time (under engine conditions: the time from the last rank's arrival to the last
/// rank's end, each call after its busy work); every rank returns the same
/// figures. Collective. Under TBCOLL_TUNER=measure the warm-up goes on until the ranks decided for the size
/// (Explanation::measuring): the figures are of the decided algorithm, not of its trials.
Measured measure(Communicator& comm, const Options& o, Buffers& b, size_t count, bool in_place, int iterations = 0,
                 bool check_first = true);

/// Buffers for count elements per block: whole-communicator sides where the collective has them.
void size_buffers(const Options& o, int world_size, size_t count, Buffers& b);

/// --compare: every algorithm named (or all of the collective's, and the automatic choice) measured in turns on
/// communicators of their own over the same store, per size; a table and a CSV. Returns the wrong elements.
long long run_compare(const Options& o, Config config);

}  // namespace tbcoll::bench
