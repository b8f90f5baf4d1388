// Tuner: a communicator's table of algorithms per collective (the transport's fast paths, then the rows of
// src/algorithms/registry.cc) and the choice among them per call, by size, dtype and world size.
//
// The choice: a fast path whose own size range holds the call (its transport measured where it wins; the
// alpha-beta figures of shared memory are too crude to place it), else the point-to-point row the cost model
// (algorithms/cost.h) predicts cheapest for the call on the communicator's links, else (TBCOLL_TUNER=ranges, a
// TBCOLL_DIRECT_MAX_BYTES set by hand, or a collective whose traits leave it to the ranges) the first row whose
// size range holds it.
// TBCOLL_ALGO (or Config::algo) forces algorithms, for every collective that has one of that name ("ring") or per
// collective ("allreduce:ring,broadcast:chain"); a forced algorithm that cannot run a call is refused, naming
// those that can. Nothing is substituted silently.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "algorithms/cost.h"
#include "algorithms/registry.h"
#include "signature.h"
#include "tbcoll/collective_fast_path.hpp"
#include "tuner_config.h"

namespace tbcoll {

/// A fast-path algorithm some device of this build may offer, with that device's name.
struct KnownFastPath {
  std::string device;
  transport::FastPathAlgorithm algorithm;
};

/// TBCOLL_ALGO parsed: per collective, the forced name or "". Throws InvalidArgument for a name no collective
/// has (bare) or that collective lacks ("allreduce:chain"), listing the names there are; known: the fast paths
/// of the build's devices.
using ForcedAlgorithms = std::array<std::string, kNumOpKinds>;
ForcedAlgorithms parse_forced(const std::string& spec, const std::vector<KnownFastPath>& known);

/// One algorithm a communicator can run for a collective: a table row or one of its fast path's.
struct Choice {
  std::string name;
  algo::Schedule run = nullptr;  ///< a point-to-point schedule, or
  int fast_path_index = -1;      ///< ... the fast path's algorithm of this index
  unsigned schedule = 0;         ///< carried in the messages' signatures (1.. for schedules; 0 for fast paths)
  algo::ByteRange auto_range = algo::kAllSizes;
  size_t max_bytes = SIZE_MAX;
  uint32_t dtypes = (1u << kNumDataTypes) - 1;
  std::string (*cannot_run)(const algo::CallShape& call) = nullptr;
  double (*cost)(const algo::CallShape& call, const algo::CostParams& params) = nullptr;

  /// Why it cannot run call ("" if it can).
  std::string refusal(const algo::CallShape& call) const;
};

/// The cost model's view of one algorithm for one call (tbcoll-perf --explain).
struct Estimate {
  std::string name;
  double seconds = -1;  ///< predicted time; < 0: the row has no cost function (or is a fast path)
  std::string refusal;  ///< why it cannot run the call ("" if it can)
  bool fast_path = false;
};

class Tuner {
 public:
  Tuner() = default;
  /// fast_path: what the communicator's fast path offers (empty if none); known: every device's fast paths;
  /// costs: the links' figures for the cost model.
  Tuner(const TunerConfig& config, int world_size, const ForcedAlgorithms& forced,
        const std::vector<transport::FastPathAlgorithm>& fast_path, std::vector<KnownFastPath> known,
        algo::CostParams costs = {});

  /// The algorithm for call. Throws InvalidArgument when the forced algorithm cannot run it.
  const Choice& choose(const algo::CallShape& call) const;
  /// Name of a point-to-point schedule by its signature number ("none" for 0, "?" if unknown).
  std::string schedule_name(OpKind kind, unsigned schedule) const;
  const TunerConfig& config() const { return config_; }
  const algo::CostParams& costs() const { return costs_; }
  /// Whether the cost model picks this collective's algorithm (TBCOLL_TUNER and the collective's traits); false:
  /// the size ranges.
  bool model_decides(OpKind kind) const { return model_decides_[static_cast<size_t>(kind)]; }
  /// Whether TBCOLL_ALGO forces an algorithm for this collective.
  bool forced(OpKind kind) const { return forced_[static_cast<size_t>(kind)] != -1; }
  /// Every algorithm of call's collective with its predicted time and whether it can run the call.
  std::vector<Estimate> estimates(const algo::CallShape& call) const;
  /// The point-to-point rows the model may pick for call (runnable, not forced-only) that it predicts at most
  /// factor x the cheapest of them, cheapest first, at most `most`; empty where the model does not decide (a
  /// forced algorithm, the size ranges).
  std::vector<const Choice*> shortlist(const algo::CallShape& call, double factor, size_t most) const;

 private:
  [[noreturn]] void refuse(const algo::CallShape& call, const std::string& why) const;

  TunerConfig config_;
  algo::CostParams costs_;
  std::array<std::vector<Choice>, kNumOpKinds> menu_;  // by OpKind, in the order the tuner asks them
  std::array<int, kNumOpKinds> forced_{};              // index into menu_, -1: none, -2: forced, not offered here
  std::array<bool, kNumOpKinds> model_decides_{};
  ForcedAlgorithms forced_names_;
  std::vector<KnownFastPath> known_;
};

}  // namespace tbcoll
