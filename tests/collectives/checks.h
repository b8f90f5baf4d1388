// Each collective checked against a simple reference, out of place and in place, with a guard byte past the
// end; failures are gtest failures naming the call. Collective: every rank of comm calls them alike.
#pragma once

#include <cstddef>

#include "tbcoll/tbcoll.hpp"

namespace tbcoll::test {

/// all_reduce of make_input(salt); also checks that every rank holds bitwise identical results.
void check_all_reduce(Communicator& comm, DataType dtype, ReduceOp op, size_t count, int salt);
void check_all_gather(Communicator& comm, DataType dtype, size_t count);
void check_broadcast(Communicator& comm, DataType dtype, size_t count, int root);
/// Rank r's input is make_input of n*count elements; rank r gets block r of the full reduction.
void check_reduce_scatter(Communicator& comm, DataType dtype, ReduceOp op, size_t count, int salt);
void check_reduce(Communicator& comm, DataType dtype, ReduceOp op, size_t count, int root);
/// A shift around the ring with send and recv (i32).
void check_send_recv(Communicator& comm, size_t count);

}  // namespace tbcoll::test
