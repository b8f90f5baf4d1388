// The algorithm table is the one place an algorithm is added: a schedule written here, in a test, becomes
// usable by name through register_algorithm() alone, with no other file touched.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "algorithms/cost.h"
#include "algorithms/registry.h"
#include "collectives/checks.h"
#include "collectives/harness.h"
#include "reduce/reduce.h"

namespace tbcoll::test {
namespace {

// Star all-reduce: every rank sends its input to rank 0, which reduces them in rank order and sends the result
// back. 2 steps; rank 0 receives and sends (n-1)S.
void all_reduce_star(algo::Exec& exec, const algo::Args& args) {
  const int n = exec.size();
  const size_t bytes = args.count * args.elem_size;
  if (exec.rank() != 0) {
    exec.isend(0, args.send, bytes);
    exec.wait(exec.irecv(0, args.recv, bytes));
    return;
  }
  std::vector<uint8_t> inputs(bytes * static_cast<size_t>(n));
  std::memcpy(inputs.data(), args.send, bytes);
  for (int p = 1; p < n; ++p) exec.irecv(p, inputs.data() + bytes * static_cast<size_t>(p), bytes);
  exec.wait_all();
  const reduce::Kernel kernel = reduce::kernel(args.dtype, args.op);
  kernel(args.recv, inputs.data(), inputs.data() + bytes, args.count);
  for (int p = 2; p < n; ++p) kernel(args.recv, args.recv, inputs.data() + bytes * static_cast<size_t>(p), args.count);
  if (args.op == ReduceOp::kAvg) reduce::divide(args.recv, args.recv, args.count, args.dtype, n);
  for (int p = 1; p < n; ++p) exec.isend(p, args.recv, bytes);
  exec.wait_all();
}

std::string refuse_two_ranks(const algo::CallShape& call) {
  return call.world_size == 2 ? "the star needs at least 3 ranks (a test constraint)" : "";
}

// Two steps of S each way: dearer than the direct exchange's one.
double star_cost(const algo::CallShape& call, const algo::CostParams& params) {
  return 2 * algo::cost_all_reduce_direct(call, params);
}

algo::Algorithm star_row() {
  algo::Algorithm row;
  row.kind = OpKind::kAllReduce;
  row.name = "test_star";
  row.description = "test only: inputs to rank 0, reduced there, sent back: 2 steps";
  row.run = all_reduce_star;
  row.cost = star_cost;
  row.cannot_run = refuse_two_ranks;
  return row;
}

void register_star() {
  static std::once_flag once;
  std::call_once(once, [] { algo::register_algorithm(star_row()); });
}

// The names of kind's rows that can run call, in table order: what an error listing them says.
std::string runnable_names(OpKind kind, const algo::CallShape& call) {
  std::string names;
  for (const algo::Algorithm& row : algo::algorithms_for(kind)) {
    if (row.cannot_run != nullptr && !row.cannot_run(call).empty()) continue;
    names += (names.empty() ? "" : ", ") + std::string(row.name);
  }
  return names;
}

TEST(Registry, TestOnlyAlgorithmRunsByNameThroughTheTableAlone) {
  register_star();
  for (const char* transport : {"loopback", "tcp"}) {
    for (const char* algo : {"allreduce:test_star", "test_star"}) {
      run_ranks(3, {transport, algo}, [&](Communicator& comm) {
        EXPECT_EQ(comm.all_reduce_algorithm(8), "test_star");
        EXPECT_EQ(comm.algorithm("all_gather", 8), "direct") << "the star is an all_reduce only";
        for (size_t count : {size_t{1}, size_t{7}, size_t{4099}}) {
          check_all_reduce(comm, DataType::kFloat32, ReduceOp::kSum, count, 0);
          check_all_reduce(comm, DataType::kInt64, ReduceOp::kProd, count, 1);
        }
        check_all_reduce(comm, DataType::kFloat16, ReduceOp::kAvg, 33, 2);
      });
    }
  }
}

TEST(Registry, RegisteredAlgorithmIsPricedLikeAnyOther) {
  register_star();
  run_ranks(3, {"loopback", ""}, [&](Communicator& comm) {
    for (size_t bytes : {size_t{8}, size_t{64} << 10, size_t{64} << 20}) {
      EXPECT_NE(comm.all_reduce_algorithm(bytes), "test_star") << bytes << " B: its two steps cost more";
    }
    EXPECT_TRUE(comm.explain("all_reduce", 8).model_decides) << "the model still decides with a registered row";
    bool listed = false;
    for (const auto& estimate : comm.explain("all_reduce", 1024).algorithms) {
      if (estimate.name == "test_star") listed = estimate.predicted_us > 0;
    }
    EXPECT_TRUE(listed) << "--explain prices the registered row";
  });
}

TEST(Registry, RowsWithoutCostNameOrScheduleAreRefused) {
  algo::Algorithm row = star_row();
  row.name = "test_unpriced";
  row.cost = nullptr;
  std::string message = error_of([&] { algo::register_algorithm(row); });
  EXPECT_NE(message.find("\"test_unpriced\" has no cost function"), std::string::npos) << message;
  row.cost = star_cost;
  row.run = nullptr;
  message = error_of([&] { algo::register_algorithm(row); });
  EXPECT_NE(message.find("has no schedule"), std::string::npos) << message;
  row.run = all_reduce_star;
  row.kind = static_cast<OpKind>(kNumOpKinds - 1);
  message = error_of([&] { algo::register_algorithm(row); });
  EXPECT_NE(message.find("has no traits row"), std::string::npos) << message;
  for (const algo::Algorithm& existing : algo::algorithms_for(OpKind::kAllReduce)) {
    EXPECT_STRNE(existing.name, "test_unpriced");
  }
}

TEST(Registry, ConstraintsOfARegisteredAlgorithmRefuseTheCall) {
  register_star();
  run_ranks(2, {"loopback", "allreduce:test_star"}, [&](Communicator& comm) {
    float x = 1;
    const std::string message = error_of([&] { comm.all_reduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum); });
    EXPECT_NE(message.find("the star needs at least 3 ranks"), std::string::npos) << message;
    const std::string can = runnable_names(OpKind::kAllReduce, {OpKind::kAllReduce, 4, 2, DataType::kFloat32, 1});
    EXPECT_NE(message.find("algorithms that can: " + can), std::string::npos) << message;
    EXPECT_EQ(can.find("test_star"), std::string::npos) << "the star refuses two ranks";
    EXPECT_FALSE(comm.broken()) << "refused before anything was sent";
  });
  algo::Algorithm again = star_row();
  again.name = "ring";
  EXPECT_THROW(algo::register_algorithm(again), InvalidArgument);
}

}  // namespace
}  // namespace tbcoll::test
