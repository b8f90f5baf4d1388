// The knobs the tuner and the schedules read (tbcoll-info lists them with their defaults).
#pragma once

#include <chrono>
#include <cstddef>

namespace tbcoll {

namespace env {
class Settings;
}

struct TunerConfig {
  size_t direct_max_bytes = 32 * 1024;  ///< all_reduce / all_gather up to this use the direct exchange
  size_t tree_max_bytes = 64 * 1024;    ///< broadcast, gather and scatter up to this use the binomial tree
  size_t chunk_bytes = 256 * 1024;      ///< pipelining chunk of the ring and chain schedules
  /// How long a spinning wait spins before it sleeps (TBCOLL_SPIN_US); negative: auto (WaitPolicy::auto_spin_cap).
  std::chrono::microseconds spin{-1};
  /// TBCOLL_WAIT: how waits pass the time (transport::WaitPolicy::Mode: 0 auto, 1 spin, 2 block).
  int wait_mode = 0;
  /// Whether the cost model picks among point-to-point rows (TBCOLL_TUNER); false: the size ranges do.
  bool use_model = false;
  /// TBCOLL_TUNER=measure: the model shortlists and the first calls of each size measure the shortlist
  /// (tuner_measured.h); trials: the fewest calls per candidate (TBCOLL_TUNE_TRIALS).
  bool measure = false;
  int measure_trials = 6;

  /// TBCOLL_DIRECT_MAX_BYTES, TBCOLL_TREE_MAX_BYTES, TBCOLL_CHUNK_BYTES, TBCOLL_SPIN_US, TBCOLL_WAIT, TBCOLL_TUNER and
  /// TBCOLL_TUNE_TRIALS from settings (the communicator's knobs, then the environment). Throws InvalidArgument naming a knob out of range.
  static TunerConfig from_env(const env::Settings& settings);
};

}  // namespace tbcoll
