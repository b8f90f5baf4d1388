// The argument checks of a call, read from its collective's traits (collective_traits.h): pure functions of the
// arguments and the communicator's shape, each throwing InvalidArgument that names the rank, the call and what
// is wrong. The call path (collectives.cc) keeps the outcome per shape, so a call that repeats the last shape of
// its collective checks only its pointers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/exec.h"
#include "algorithms/registry.h"
#include "collective_traits.h"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll {

/// One collective call's arguments, in the order every collective takes them (send, recv, count, dtype, op,
/// root; the rest of algo::Args is the call path's).
using CallArgs = algo::Args;

/// What the checks found of a call's shape (all but its pointers).
struct CheckedShape {
  size_t bytes = 0;         ///< the tuner's bytes: count's, times n where a side is per rank
  algo::CallShape shape;    ///< what the tuner chooses by
  uint64_t meta = 0;        ///< the call's signature (signature.h)
};

/// The checks of dtype, op and root (where the collective takes them) and of the byte count's overflow.
CheckedShape check_shape(const CollectiveTraits& traits, int rank, int size, int hosts, const CallArgs& args);
/// The checks of the pointers: null buffers with a count, addresses in the first page (MPI_IN_PLACE), buffers
/// that overlap other than by the collective's in-place rule. bytes: check_shape's.
void check_buffers(const CollectiveTraits& traits, int rank, int size, const CallArgs& args, size_t bytes);

// The pieces, for the calls outside the table (send/recv, all_to_allv).
void check_dtype(int rank, const char* call, DataType dtype);
void check_op(int rank, const char* call, ReduceOp op);
void check_rank(int rank, int size, const char* call, const char* which, int value);
/// count * elem_size * factor in bytes; InvalidArgument when it overflows or exceeds what a process can map (2^47).
size_t checked_bytes(int rank, const char* call, size_t count, DataType dtype, size_t factor);
void check_buffer(int rank, const char* call, const char* which, const void* buf, size_t count);
/// Refuses send and recv that overlap, unless in_place (the collective's own layout, described by layout).
void check_overlap(int rank, const char* call, const void* send, size_t send_bytes, const void* recv,
                   size_t recv_bytes, bool in_place, const char* layout);

}  // namespace tbcoll
