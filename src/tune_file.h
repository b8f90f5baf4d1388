// TBCOLL_TUNE_FILE: the decisions TBCOLL_TUNER=measure took, saved for later jobs, as Open MPI's dynamic rules file
// (coll_tuned_dynamic_rules_filename) and Intel MPI's tuning file keep theirs.
//
// With TBCOLL_TUNER=measure the file is read at set-up (when it exists) and every decision the ranks then agree on
// is added to it by rank 0; with the model (TBCOLL_TUNER=model or auto) it is only read, and must exist. Decisions
// apply where the model would decide: not to collectives TBCOLL_ALGO forces, nor under TBCOLL_TUNER=ranges.
// Rank 0 reads the file and passes its text, with the communicator's shape as rank 0 sees it, to every rank
// through the store; every rank parses the same text alike, so every rank decides alike (or fails alike).
//
// The format (text, one record a line; '#' starts a comment line; fields separated by single spaces):
//
//   tbcoll-tune-file 1
//   algorithms all_reduce direct,tree,recursive_doubling,halving_doubling,mesh,hierarchical,ring
//   decision all_reduce 8 8 1 tcp latency_us=500,gbps=0.6 65536 131071 tree tree=6101.2,ring=8020.7
//
//   tbcoll-tune-file V   the format's version, the first record (this build reads and writes 1)
//   algorithms C LIST    collective C's algorithm table (its rows, in order) in the build that measured: a build
//                        whose table differs never measured its own rows against these, so the file is stale
//   decision C RANKS RANKS_PER_HOST HOSTS TRANSPORT LINK MIN MAX ALGORITHM MEASURED
//                        for collective C on a communicator of RANKS ranks, at most RANKS_PER_HOST on one host,
//                        HOSTS hosts, TRANSPORT the transports rank 0 reaches its peers over ("tcp", "shm+tcp"),
//                        LINK the link emulation ("off", or latency_us=N[,gbps=N], dilation applied), calls of
//                        MIN to MAX bytes (one octave, 2^k to 2^(k+1)-1; 0 to 1 for the first) run ALGORITHM;
//                        MEASURED: the candidates' measured times (name=us, comma-separated; inf: did not run)
//
// Refused (InvalidArgument at set-up, naming the file, the line and what does not fit): a record that does not
// parse, an unknown collective or algorithm, a range that is not one octave, two decisions for one shape and
// octave, an algorithm that cannot run the range on this communicator, another version, or a stale table. A
// decision for another shape is kept in the file and not used here.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include "algorithms/cost.h"
#include "tbcoll/collective_fast_path.hpp"
#include "tbcoll/store.hpp"

namespace tbcoll {

class MeasuredChoices;
class Tuner;

/// A communicator's shape, what a saved decision must match to apply.
struct TuneShape {
  int ranks = 0;
  int ranks_per_host = 0;
  int hosts = 0;
  std::string transport;  ///< the transports rank 0 reaches its peers over, sorted, joined by '+'
  std::string link;       ///< link_token() of the emulation
  /// "8 8 1 tcp off", as the decision records hold it.
  std::string text() const;
  bool operator==(const TuneShape& other) const { return text() == other.text(); }
};

/// This rank's view of its communicator: size, hosts and ranks per host from costs, the transports of its peers
/// (transport_names, by rank; "self" for itself), the link emulation (transport::SetUpDevices::emulation_token).
TuneShape tune_shape(int size, const algo::CostParams& costs, const std::vector<std::string>& transport_names,
                     const std::string& emulation_token);

struct SavedDecision {
  OpKind kind{};
  TuneShape shape;
  size_t min_bytes = 0, max_bytes = 0;
  std::string algorithm;
  std::string measured;  ///< "tree=6101.2,ring=8020.7"
  int line = 0;          ///< where it stands in the file it was read from (0: not read)
};

/// Parses a tune file's text. Throws InvalidArgument naming path, the line and what does not fit (see above).
std::vector<SavedDecision> parse_tune_file(const std::string& text, const std::string& path);
/// A tune file's text holding decisions, with the build's tables of their collectives.
std::string format_tune_file(const std::vector<SavedDecision>& decisions);
/// Writes decision into the file at path (read again first: other communicators may have added theirs; the same
/// shape, collective and octave replaced), through a temporary file renamed over it. Serialised in the process.
/// Throws IoError when it cannot write, InvalidArgument when the file there no longer parses.
void save_decision(const std::string& path, const SavedDecision& decision);

struct TuneFileSetup {
  std::string path;                             ///< TBCOLL_TUNE_FILE
  int rank = 0;
  TuneShape shape;                              ///< as this rank sees it: rank 0's is the one used
  Store* store = nullptr;
  std::string prefix;                           ///< the communicator's store prefix
  Deadline deadline{};
  const std::atomic<bool>* cancelled = nullptr;
};

/// At set-up, on every rank: rank 0 reads the file and publishes it with its shape; every rank takes rank 0's,
/// checks it against tuner (its algorithms, what they can run) and hands measured the decisions for that shape;
/// under TBCOLL_TUNER=measure rank 0 then saves each new decision. Throws InvalidArgument on every rank when the
/// file does not fit (rank 0's reason), or is missing while the model alone reads it.
void attach_tune_file(MeasuredChoices& measured, const Tuner& tuner, const TuneFileSetup& setup);

}  // namespace tbcoll
