// Tuner: picks the schedule for a call from the op, its size in bytes and the world size; TBCOLL_ALGO or
// Config::algo overrides it (a name that does not apply to the op is an error).
#pragma once

#include <cstddef>
#include <string>

#include "signature.h"

namespace tbcoll {

enum class Algorithm { kSelf, kRing, kDirect, kTree, kChain, kDissemination, kOneShot, kCma, kTwoShot };

struct TunerConfig {
  size_t direct_max_bytes = 32 * 1024;  ///< all_reduce / all_gather up to this use the direct exchange
  size_t tree_max_bytes = 64 * 1024;    ///< broadcast up to this uses the binomial tree
  size_t one_shot_max_bytes = 0;        ///< all_reduce up to this uses the transport's one-shot fast path (0: none)
  size_t one_shot_limit_bytes = 0;      ///< largest all_reduce the fast path takes when forced (TBCOLL_ALGO=oneshot)
  bool two_shot = false;  ///< the transport's two-shot all_reduce through shared memory (above direct_max_bytes)
  bool cma = false;                     ///< the transport's direct (cross-memory attach) collectives are available
  size_t cma_min_bytes = 4 << 20;      ///< all_reduce from this size reads peers' buffers in place
  size_t cma_max_bytes = 32 << 20;     ///< ... below this size (beyond, the two-shot with streaming stores)
  size_t cma_gather_min_bytes = 16 * 1024;  ///< all_gather (total bytes) and broadcast from this size do
  std::string forced;                   ///< algorithm name, or empty
};

/// Algorithm for kind with bytes (per rank: the input of all_reduce/broadcast, the gathered total of
/// all_gather) on world_size ranks. Throws InvalidArgument for a forced name that does not fit the op.
Algorithm choose_algorithm(OpKind kind, size_t bytes, int world_size, const TunerConfig& config);
const char* algorithm_name(Algorithm algorithm);
/// Throws InvalidArgument unless name is empty or one of the algorithm names.
void check_algorithm_name(const std::string& name);

}  // namespace tbcoll
