// The algorithm table: one row per algorithm of each collective. The tuner, the dispatch, TBCOLL_ALGO, error
// messages, tbcoll-info and tbcoll-perf --algo all read it. A row lives in the file of its schedule, which opens
// with a picture of the schedule and its cost:
//
//   TBCOLL_ALGORITHM(all_reduce_ring) {   // the file's name: src/algorithms/all_reduce_ring.cc
//     Algorithm row;
//     row.kind = OpKind::kAllReduce;
//     row.name = "ring";
//     ...
//     return row;
//   }
//
// The build finds every such file (CMakeLists.txt lists src/algorithms/*.cc's TBCOLL_ALGORITHM lines) and makes
// the table of them: adding an algorithm is one file. A test or a plug-in adds rows at run time with
// register_algorithm(). A transport's fast-path algorithms (tbcoll/collective_fast_path.hpp) join a
// communicator's table at set-up (tuner.h), ahead of these rows.
//
// The tuner takes the row the cost model predicts cheapest (Algorithm::cost, which every row has), for the
// collectives whose traits say the model decides (collective_traits.h); otherwise (those collectives,
// TBCOLL_TUNER=ranges) it asks the collective's rows in the order of their `position` and takes the first whose
// default range holds the call's size and that can run it, so each collective's last row takes every size.
// Names are unique per collective; the same name may serve several collectives (ring all_reduce, ring all_gather).
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
  /// The alpha-beta model's predicted time of the call in seconds (algorithms/cost.h). Required: --explain
  /// prices every row, and where the collective's traits say the model decides, the tuner takes the cheapest.
  double (*cost)(const CallShape& call, const CostParams& params) = nullptr;
  /// The row's place among its collective's rows (ascending; ties by name): the order the size ranges ask them
  /// in, and the schedule number messages carry (signature.h). Built-in rows use 10..100, the last taking every
  /// size; registered rows default to after them.
  int position = 1000;
  /// Sizes the tuner picks it for when the ranges decide, from the communicator's tuning; null: every size; an
  /// empty range ({0, 0}, forced_only): only when TBCOLL_ALGO forces it.
  ByteRange (*auto_range)(const TunerConfig& tuning, int world_size) = nullptr;
  /// Why it cannot run the call, or "" if it can; null: it runs every call. A forced algorithm that cannot
  /// run a call is refused with this reason.
  std::string (*cannot_run)(const CallShape& call) = nullptr;
};

// The rows' shared size ranges and constraints.
/// A row the tuner never picks on its own (TBCOLL_ALGO forces it).
ByteRange forced_only(const TunerConfig& tuning, int world_size);
/// Up to TBCOLL_DIRECT_MAX_BYTES (the direct exchanges).
ByteRange direct_range(const TunerConfig& tuning, int world_size);
/// Up to TBCOLL_TREE_MAX_BYTES, every size on two ranks (the binomial trees: log2 n steps beat a chain's pipeline
/// for small messages; with two ranks both are one message, and the tree sends it whole).
ByteRange binomial_range(const TunerConfig& tuning, int world_size);
/// Every size where the cost model decides, none where the ranges do (TBCOLL_TUNER=ranges): the schedules
/// beyond the direct exchange and the ring, which run under the ranges only when forced.
ByteRange by_model(const TunerConfig& tuning, int world_size);
/// cannot_run of the hierarchical schedules: they need several hosts, one of them with several ranks.
std::string needs_hosts_with_several_ranks(const CallShape& call);

/// Defines the row function of the algorithm file id.cc (see above). id names the file; the build lists it.
#define TBCOLL_ALGORITHM(id) ::tbcoll::algo::Algorithm tbcoll_algorithm_row_##id()

/// The rows of one collective, in the tuner's order (built-in rows, then registered ones, by position).
std::vector<Algorithm> algorithms_for(OpKind kind);
/// Adds a row (a test-only schedule, say). Takes effect for communicators created afterwards. Throws
/// InvalidArgument naming what is wrong: no name, schedule or cost, a collective that has no traits row, a name
/// the collective has already, or kMaxSchedules rows of that collective already. Thread-safe.
void register_algorithm(const Algorithm& row);
/// The name every collective reports on a one-rank communicator (nothing is sent).
const char* self_algorithm_name();

/// Collectives by the names users write: the traits' name or short name ("all_reduce", "allreduce", "bcast",
/// ...). False if unknown.
bool parse_collective(const std::string& name, OpKind* kind);
/// The collectives that have algorithms, in the order tools list them (collective_traits()).
std::vector<OpKind> collectives();

}  // namespace tbcoll::algo
