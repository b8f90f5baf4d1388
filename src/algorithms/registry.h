// The algorithm table: one row per algorithm of each collective. The tuner, the dispatch, TBCOLL_ALGO, error
// messages, tbcoll-info and tbcoll-perf --algo all read it; adding an algorithm is one file with its schedule
// and one row in registry.cc. A transport's fast-path algorithms (tbcoll/collective_fast_path.hpp) join a communicator's
// table at set-up (tuner.h), ahead of these rows.
//
// The tuner takes the row the cost model predicts cheapest (Algorithm::cost); without a model (TBCOLL_TUNER=ranges,
// or a row without a cost) it asks a collective's rows in table order and takes the first whose default range
// holds the call's size and that can run it, so each collective's last row takes every size. Names are unique per
// collective; the same name may serve several collectives (ring all_reduce, ring all_gather).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "algorithms/exec.h"
#include "tbcoll/collective_fast_path.hpp"

namespace tbcoll {
struct TunerConfig;
}

namespace tbcoll::algo {

struct CostParams;  // algorithms/cost.h

/// What the tuner and the constraints see of a call.
struct CallShape {
  OpKind kind = OpKind::kAllReduce;
  /// per rank: the input of all_reduce, reduce, broadcast; the total of all_gather, reduce_scatter, all_to_all,
  /// gather, scatter (the root's buffer); 0 for all_to_allv, whose sizes differ from rank to rank (the choice must
  /// be the same on every rank).
  size_t bytes = 0;
  int world_size = 1;
  DataType dtype = DataType::kFloat32;
  int hosts = 1;  ///< how many hosts the communicator's ranks are on (TBCOLL_HOST_ID tells them apart)
};

/// [min, max) in bytes.
struct ByteRange {
  size_t min = 0;
  size_t max = 0;
  bool holds(size_t bytes) const { return min <= bytes && bytes < max; }
};
constexpr ByteRange kAllSizes{0, SIZE_MAX};
/// [0, limit]: "up to limit bytes", as the size knobs say.
inline ByteRange up_to(size_t limit) { return {0, limit == SIZE_MAX ? SIZE_MAX : limit + 1}; }

using Schedule = void (*)(Exec& exec, const Args& args);

struct Algorithm {
  OpKind kind = OpKind::kAllReduce;
  const char* name = "";
  const char* description = "";  ///< one line: the schedule and its cost (n ranks, S bytes)
  Schedule run = nullptr;
  /// Sizes the tuner picks it for by default, from the communicator's tuning; null: every size.
  ByteRange (*auto_range)(const TunerConfig& tuning, int world_size) = nullptr;
  /// Why it cannot run the call, or "" if it can; null: it runs every call. A forced algorithm that cannot
  /// run a call is refused with this reason.
  std::string (*cannot_run)(const CallShape& call) = nullptr;
  /// The alpha-beta model's predicted time of the call in seconds (algorithms/cost.h); null: no model. When every
  /// row of a collective that can run a call has one, the tuner takes the cheapest; otherwise the ranges decide.
  double (*cost)(const CallShape& call, const CostParams& params) = nullptr;
};

/// The rows of one collective, in the tuner's order (built-in rows, then registered ones).
std::vector<Algorithm> algorithms_for(OpKind kind);
/// Every row, collective by collective (for tbcoll-info).
std::vector<Algorithm> all_algorithms();
/// Adds a row at the end of its collective's table (a test-only schedule, say). Takes effect for communicators
/// created afterwards. Throws InvalidArgument if the collective already has a row of that name, or has
/// kMaxSchedules rows. Thread-safe.
void register_algorithm(const Algorithm& row);
/// The name every collective reports on a one-rank communicator (nothing is sent).
const char* self_algorithm_name();

/// Collectives by the names users write: "all_reduce" or "allreduce", "all_gather"/"allgather",
/// "reduce_scatter"/"reducescatter", "reduce", "broadcast"/"bcast", "barrier", "all_to_all"/"alltoall",
/// "all_to_allv"/"alltoallv", "gather", "scatter". False if unknown.
bool parse_collective(const std::string& name, OpKind* kind);
/// The collectives that have algorithms, in the order tools list them.
const std::vector<OpKind>& collectives();

}  // namespace tbcoll::algo
