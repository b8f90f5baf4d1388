// TBCOLL_TUNER=measure: the cost model shortlists, the first calls measure the shortlist, the ranks agree.
//
// The alpha-beta model (algorithms/cost.h) ranks algorithms well where its terms describe the machine, and
// misses where they do not: 4-8 ranks sharing 2 CPUs, where the tree beat the ring the model picked by
// 1.2-1.4x at 4-64 MiB although both move the same bytes (benchmarks/tuner_sweep.sh). Measuring settles what
// the model cannot tell apart, as Intel MPI's autotuner (I_MPI_TUNING_MODE=auto) and FFTW's FFTW_MEASURE do.
//
// Per collective and octave of size (calls of 2^k to 2^(k+1) - 1 bytes share one decision):
//   shortlist  the point-to-point rows the model predicts at most kShortlistFactor x the cheapest, cheapest first,
//              at most kMaxCandidates (the model's errors measured so far stay below 1.8x);
//   trials     about N calls per candidate: enough for about kTrialSeconds by the model's cheapest prediction,
//              at least TBCOLL_TUNE_TRIALS (6), at most kMaxCalls (small calls are cheap to time and noisy). They
//              run in rounds of batches: round r runs a batch of B back-to-back calls of each candidate in turn
//              (B = max(2, N / 4), at least 2 rounds), so every candidate meets the machine's drifts alike and
//              runs as it will once decided: calls of one algorithm after each other. A batch's first call pays
//              for the switch (the previous algorithm's ranks finishing at other times, first touches) and does
//              not count: measured at 3 ranks over tcp with tb5-rdma's latency, single calls in turn picked
//              direct where batches picked recursive doubling, 1.3-1.5x faster in steady state;
//   agreement  after the last trial each rank holds its own time of every trial call; one all_reduce (max, f64,
//              the model's own pick, never measured) gives every rank the slowest rank's time of each, which is
//              the call's time; per candidate the lower median of its counted calls stands (noise falls out);
//   decision   the candidate with the least time, on every rank alike (the same figures, the same rule); later
//              calls of the octave run it. A call the decided (or trial) algorithm cannot run takes the model's.
// Every rank makes the same calls in the same order, so every rank runs the same trial at the same call; the
// state is touched only by the thread that runs calls (the caller's, or the asynchronous queue's, one at a
// time), and read under a lock by algorithm() and explain().
//
// Costs: m x N calls per octave before the decision, some of them by slower algorithms: about 50 ms per
// candidate, at least 6 calls and at most 32 (60 ms per candidate for 10 ms calls, 1.6 ms for 50 us calls), plus
// one small all_reduce. Fewer would not do: with 4 ranks on 2 CPUs over tcp, single 16 MiB calls of the ring
// and of the tree took anywhere from 11 to 42 ms, in spells of several calls alike.
//
// Results stay bitwise identical on every rank within a call; two runs may decide differently where candidates
// are near-equal, so results may differ between runs in the last bits (the model alone, TBCOLL_TUNER=model,
// picks the same on every run). TBCOLL_TUNE_FILE (tune_file.h) saves the decisions, and later jobs start from
// them: a saved octave runs its algorithm from the first call, with no trials.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/registry.h"

namespace tbcoll {

struct Choice;
class Tuner;

class MeasuredChoices {
 public:
  static constexpr double kShortlistFactor = 2.0;
  static constexpr size_t kMaxCandidates = 4;
  static constexpr double kTrialSeconds = 50e-3;
  static constexpr int kMaxCalls = 32;

  /// trials: the fewest calls per candidate (TBCOLL_TUNE_TRIALS, >= 1).
  explicit MeasuredChoices(int trials = 6) : trials_(trials) {}
  /// Before the first call only.
  void set_trials(int trials) { trials_ = trials; }
  /// Whether undecided octaves are measured (TBCOLL_TUNER=measure, the default here); false: only the saved
  /// decisions apply, the model's choice elsewhere. Before the first call only.
  void set_measuring(bool measuring) { measuring_ = measuring; }
  /// A saved decision (TBCOLL_TUNE_FILE) for kind's octave: its calls run choice; describe() reports `from`.
  /// Before the first call only.
  void preset(OpKind kind, int octave, const Choice* choice, std::string from);
  /// Whether any saved decision was preset (read on every call without the lock: set before the first call).
  bool has_saved() const { return has_saved_; }
  /// Called with each decision the ranks agree on (collective, octave, algorithm, the candidates' times as
  /// "tree=6101.2,ring=8020.7" in us), by the thread that decided, outside the lock.
  using Saver = std::function<void(OpKind, int, const std::string&, const std::string&)>;
  void save_with(Saver saver) { saver_ = std::move(saver); }

  /// What a call runs and whether to time it (trial >= 0: pass it to record()).
  struct Pick {
    const Choice* choice = nullptr;
    int trial = -1;         ///< >= 0: a trial call, to be timed and passed to record()
    bool stand_in = false;  ///< the trial's candidate cannot run this call: the model's runs, its time not counted
  };
  /// The algorithm for call: a candidate under trial, the agreed (or saved) one, or model (the tuner's choice)
  /// where the octave is not measured (a fast path chose, a forced algorithm, the size ranges, fewer than two
  /// candidates, not measuring) or the pick cannot run this call.
  Pick pick(const algo::CallShape& call, const Choice& model, const Tuner& tuner);
  /// This rank's time of trial call `trial`. Returns true after the octave's last trial: then *times holds this
  /// rank's times of all its trials, to be turned into the slowest rank's by an all_reduce (max) and handed to
  /// decide().
  bool record(const algo::CallShape& call, const Pick& pick, double seconds, std::vector<double>* times);
  /// slowest: per trial call, the slowest rank's time (record()'s vector, reduced by max over ranks).
  void decide(const algo::CallShape& call, const std::vector<double>& slowest);

  /// The algorithm decided for call's octave, "" while undecided or not measured.
  std::string decided(const algo::CallShape& call) const;
  /// "tree 6101.2 us, ring 8020.7 us (measured: ...)" for the octave, or "" while undecided.
  std::string describe(const algo::CallShape& call) const;

  /// The octave a call of `bytes` falls in (0 for 0 and 1 bytes).
  static int octave(size_t bytes);

 private:
  struct Entry {
    std::vector<const Choice*> candidates;  // cheapest predicted first; fewer than 2: not measured
    std::vector<double> seconds;            // [(round * m + c) * batch + i]
    size_t batch = 1;                       // calls of a candidate in a row
    size_t calls = 0;                       // trial calls run so far
    const Choice* decided = nullptr;
    std::vector<double> typical;            // per candidate, the lower median of its counted calls, once decided
    size_t counted = 0;                     // per candidate
    std::string saved;                      // a saved decision: where it came from (describe())
  };
  size_t candidate_of(const Entry& entry, size_t trial) const {
    return trial / entry.batch % entry.candidates.size();
  }
  using Key = std::pair<int, int>;  // (OpKind, octave)
  static Key key_of(const algo::CallShape& call) { return {static_cast<int>(call.kind), octave(call.bytes)}; }

  int trials_;
  bool measuring_ = true;
  bool has_saved_ = false;
  Saver saver_;
  mutable std::mutex mutex_;
  std::map<Key, Entry> entries_;
};

}  // namespace tbcoll
