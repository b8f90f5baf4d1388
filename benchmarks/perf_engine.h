// tbcoll-perf under an engine's conditions. Engines compute between collectives (--compute-us), their ranks
// arrive at a call at different times (--skew-us: one rank late), and other threads compete for the cores
// (--background N: N threads spinning, placed by the scheduler). A loop of back-to-back calls measures none of
// that: there a call's time also hides the ranks' arrival order. Here each call is timed from the arrival of the
// last rank to the end of the last rank's call (the ranks' clocks put on rank 0's by a ping-pong, so ranks on
// several hosts can be compared too), which is what an engine waits for beyond its own work.
#pragma once

#include <atomic>
#include <thread>
#include <vector>

#include "tbcoll/tbcoll.hpp"

namespace tbcoll::bench {

struct EngineConditions {
  double compute_us = 0;  ///< --compute-us: busy work on every rank before each call
  double skew_us = 0;     ///< --skew-us: more busy work on the late rank
  int skew_rank = -1;     ///< --skew-rank: the late rank (-1: the last)
  int background = 0;     ///< --background: threads spinning in rank 0's process while it runs
  bool active() const { return compute_us > 0 || skew_us > 0 || background > 0; }
  /// "compute 50 us, rank 1 late by 20 us, 1 background thread" (for the table's header).
  std::string describe(int world_size) const;
};

/// Threads that spin until destroyed (the --background load), in this process, allowed on every CPU.
class BackgroundLoad {
 public:
  explicit BackgroundLoad(int threads);
  ~BackgroundLoad();
  BackgroundLoad(const BackgroundLoad&) = delete;
  BackgroundLoad& operator=(const BackgroundLoad&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

/// Busy work (a spin on the clock) for us microseconds.
void compute_for(double us);

/// This rank's steady clock minus rank 0's, in us: per rank, the ping-pong of 64 round trips with rank 0 whose
/// round trip was shortest (its error is at most half of it). Collective.
double clock_offset_us(Communicator& comm);

/// The time of each call: from the last rank's arrival (start) to the last rank's end (end), in us. starts and
/// ends are this rank's, already on rank 0's clock. *per_iteration_us: the whole loop's time over its calls (the
/// last rank's last end minus the first rank's first arrival, over the calls). Collective; every rank gets the
/// same figures.
std::vector<double> after_last_arrival(Communicator& comm, std::vector<double> starts, std::vector<double> ends,
                                       double* per_iteration_us);

}  // namespace tbcoll::bench
