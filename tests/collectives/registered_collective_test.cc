// A collective added by one file: a test-only inclusive scan (as MPI_Scan: rank r ends with the reduction of
// ranks 0..r) with its traits row and its one algorithm, registered here and run through the one call path
// (checks, refusals, tuner, signatures) like a built-in collective.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "algorithms/registry.h"
#include "collective_traits.h"
#include "collectives/checks.h"
#include "collectives/harness.h"
#include "communicator.h"
#include "reduce/reduce.h"

namespace tbcoll::test {
namespace {

constexpr OpKind kScan = static_cast<OpKind>(kFirstRegisteredOpKind);

// Linear scan: rank r waits for the partial result of ranks 0..r-1, reduces its own input into it and passes the
// new partial on to r+1. n-1 steps in sequence, S per link.
//
//   r0 --x0--> r1 --x0+x1--> r2 --x0+x1+x2--> r3
void scan_linear(algo::Exec& exec, const algo::Args& args) {
  const int r = exec.rank();
  const size_t bytes = args.count * args.elem_size;
  if (r == 0) {
    if (args.send != args.recv) std::memcpy(args.recv, args.send, bytes);
  } else {
    std::vector<uint8_t> partial(bytes);
    exec.wait(exec.irecv(r - 1, partial.data(), bytes));
    reduce::kernel(args.dtype, args.op)(args.recv, partial.data(), args.send, args.count);
  }
  if (r + 1 < exec.size()) exec.wait(exec.isend(r + 1, args.recv, bytes));
}

double scan_cost(const algo::CallShape& call, const algo::CostParams& params) {
  const double n = call.world_size, s = static_cast<double>(call.bytes);
  return (n - 1) * (params.flat().alpha + s * params.flat().beta);
}

double one(int) { return 1; }

void register_scan() {
  static std::once_flag once;
  std::call_once(once, [] {
    CollectiveTraits traits;
    traits.kind = kScan;
    traits.name = "test_scan";
    traits.short_name = "testscan";
    traits.reduces = true;
    traits.bus_factor = one;
    register_collective(traits);
    algo::Algorithm row;
    row.kind = kScan;
    row.name = "linear";
    row.description = "test only: each rank's partial result to the next: n-1 steps of S";
    row.run = scan_linear;
    row.cost = scan_cost;
    algo::register_algorithm(row);
  });
}

void scan(Communicator& comm, const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
  CommunicatorAccess::impl(comm).call(kScan, {send, recv, count, dtype, op, 0});
}

TEST(RegisteredCollective, RunsThroughTheCallPathAgainstAReference) {
  register_scan();
  ASSERT_NE(traits_named("testscan"), nullptr);
  EXPECT_STREQ(op_kind_name(kScan), "test_scan");
  for (int n : {1, 2, 3, 5}) {
    run_ranks(n, {"loopback", ""}, [&](Communicator& comm) {
      EXPECT_EQ(comm.algorithm("test_scan", 64), n == 1 ? "self" : "linear");
      for (DataType dtype : {DataType::kFloat32, DataType::kInt64}) {
        for (size_t count : {size_t{1}, size_t{7}, size_t{1000}}) {
          for (bool in_place : {false, true}) {
            const std::vector<uint8_t> input = make_input(dtype, comm.rank(), count);
            std::vector<uint8_t> out = in_place ? input : std::vector<uint8_t>(input.size());
            scan(comm, in_place ? out.data() : input.data(), out.data(), count, dtype, ReduceOp::kSum);
            // The reference: the all_reduce of the ranks 0..r, as the harness computes it for r + 1 ranks.
            const auto want = reference_all_reduce(dtype, ReduceOp::kSum, comm.rank() + 1, count);
            EXPECT_EQ(count_wrong(dtype, out, want), 0u) << "rank " << comm.rank() << " of " << n << ", " << to_string(dtype) << ", count " << count;
          }
        }
      }
    });
  }
}

TEST(RegisteredCollective, ItsArgumentsAreCheckedByItsTraits) {
  register_scan();
  run_ranks(2, {"loopback", ""}, [&](Communicator& comm) {
    float x[4] = {};
    EXPECT_NE(error_of([&] { scan(comm, x, nullptr, 4, DataType::kFloat32, ReduceOp::kSum); })
                  .find("test_scan: recv buffer is null with count 4"), std::string::npos);
    EXPECT_NE(error_of([&] { scan(comm, x, x + 1, 2, DataType::kFloat32, ReduceOp::kSum); })
                  .find("overlap without being in place"), std::string::npos);
    EXPECT_NE(error_of([&] { scan(comm, x, x, 1, DataType::kFloat32, static_cast<ReduceOp>(9)); })
                  .find("test_scan: invalid reduction op 9"), std::string::npos);
    // Both ranks refused alike and stay in step: a valid call works.
    float y = static_cast<float>(comm.rank() + 1);
    scan(comm, &y, &y, 1, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_EQ(y, comm.rank() == 0 ? 1.0f : 3.0f);
  });
}

TEST(RegisteredCollective, KindsAndNamesAreCheckedAtRegistration) {
  register_scan();
  CollectiveTraits twice;
  twice.kind = kScan;
  twice.name = "another";
  twice.bus_factor = one;
  EXPECT_NE(error_of([&] { register_collective(twice); }).find("is test_scan already"), std::string::npos);
  twice.kind = OpKind::kAllReduce;
  EXPECT_NE(error_of([&] { register_collective(twice); }).find("not one of the free values"), std::string::npos);
  twice.kind = static_cast<OpKind>(kFirstRegisteredOpKind + 1);
  twice.name = "bcast";
  EXPECT_NE(error_of([&] { register_collective(twice); }).find("named \"bcast\" exists"), std::string::npos);
}

}  // namespace
}  // namespace tbcoll::test
