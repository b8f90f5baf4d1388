// tbcoll-perf's inputs and its check of every result, kept apart so tests can feed the check broken results.
//
// Inputs are small integers that differ from rank to rank and element to element (a hash of both), so data from
// the wrong rank, a missing or doubled rank, or a chunk in the wrong place changes the result. Their range is
// chosen per dtype, op and world size so that every partial result the library may form, in any order, is exact;
// results are then compared bit for bit. Integer sums and products wrap as the library documents.
#pragma once

#include <cstddef>

#include "tbcoll/tbcoll.hpp"

namespace tbcoll::bench {

enum class Collective {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kReduce,
  kBroadcast,
  kAllToAll,   ///< all_to_allv too: tbcoll-perf runs it with equal counts
  kGather,
  kScatter,
};

struct CheckSpec {
  Collective kind = Collective::kAllReduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;  ///< reductions only
  int world_size = 1;
  int root = 0;  ///< reduce and broadcast
};

/// Writes rank's input: `elements` elements of spec.dtype (world_size * count for reduce_scatter, all_to_all and
/// scatter).
void fill_input(const CheckSpec& spec, int rank, void* data, size_t elements);

/// Elements of rank's result that differ from the reference. result is what the collective left in rank's
/// output: count elements, or world_size * count for all_gather, all_to_all and gather. Reduce and gather check the
/// root only (0 elsewhere); block p of all_to_all is block `rank` of rank p's input, scatter's is the root's.
long long count_wrong(const CheckSpec& spec, int rank, const void* result, size_t count);

}  // namespace tbcoll::bench
