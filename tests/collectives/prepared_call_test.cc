// Prepared fast-path calls (CollectiveFastPath::prepare): the communicator prepares a shape once and runs every
// call that repeats it through its preparation, whatever the buffers; a shape it cannot run prepared (an f16
// average, divided first) goes through run(); a preparation that fails fails the call and keeps nothing. Counted
// on a test transport whose fast path "all-reduces" by copying send to recv (each rank alone: only the counts and
// the buffers each call used matter here).
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collectives/harness.h"
#include "collectives/wrapped_device.h"
#include "common/dtype.h"
#include "tbcoll/collective_fast_path.hpp"
#include "tbcoll/transport.hpp"

namespace tbcoll::test {
namespace {

struct Counts {
  std::atomic<int> prepares{0};       ///< prepare() calls
  std::atomic<int> prepared_runs{0};  ///< PreparedFastCall::run() calls
  std::atomic<int> runs{0};           ///< run() calls
  std::atomic<bool> deadline_unread{true};  ///< every prepared run was left to read its deadline when needed
};
std::array<Counts, 2> counts;             // by rank
std::atomic<size_t> refuse_count{0};      // prepare() throws for this count (0: never)

void copy_call(const transport::CollectiveArgs& args) {
  if (args.send != args.recv) std::memcpy(args.recv, args.send, args.count * element_size(args.dtype));
}

class CopyPrepared final : public transport::PreparedFastCall {
 public:
  explicit CopyPrepared(Counts& counts) : counts_(counts) {}
  void run(const transport::CollectiveArgs& args) override {
    ++counts_.prepared_runs;
    if (args.deadline != Deadline::min() || transport::call_deadline(args) <= Clock::now()) {
      counts_.deadline_unread = false;
    }
    copy_call(args);
  }

 private:
  Counts& counts_;
};

std::vector<transport::FastPathAlgorithm> copy_algorithms() {
  transport::FastPathAlgorithm copy{"copy", OpKind::kAllReduce, "copies send to recv (a test's)"};
  copy.max_bytes = 4096;
  copy.auto_max_bytes = 4097;
  return {copy};
}

class CopyFastPath final : public transport::CollectiveFastPath {
 public:
  explicit CopyFastPath(int rank) : counts_(counts[static_cast<size_t>(rank)]) {}
  const std::vector<transport::FastPathAlgorithm>& algorithms() const override { return algorithms_; }
  void run(size_t, const transport::CollectiveArgs& args) override {
    ++counts_.runs;
    copy_call(args);
  }
  void announce(const transport::Tag&) override {}
  std::unique_ptr<transport::PreparedFastCall> prepare(size_t, const transport::CollectiveArgs& args) override {
    ++counts_.prepares;
    if (args.count == refuse_count) throw InvalidUsage("copy fast path: this test's refused shape");
    return std::make_unique<CopyPrepared>(counts_);
  }

 private:
  Counts& counts_;
  std::vector<transport::FastPathAlgorithm> algorithms_ = copy_algorithms();
};

class CopyContext final : public WrappedContext {
 public:
  CopyContext(std::unique_ptr<transport::Context> inner, int rank)
      : WrappedContext(std::move(inner)), fast_path_(rank) {}
  transport::CollectiveFastPath* fast_path() override { return &fast_path_; }

 private:
  CopyFastPath fast_path_;
};

class CopyDevice final : public WrappedDevice {
 public:
  explicit CopyDevice(std::shared_ptr<transport::Device> inner) : WrappedDevice("prepared-copy", std::move(inner)) {}
  std::vector<transport::FastPathAlgorithm> fast_path_algorithms() const override { return copy_algorithms(); }
  std::unique_ptr<transport::Context> create_context(const transport::ContextArgs& args) override {
    return std::make_unique<CopyContext>(inner_->create_context(args), args.rank);
  }
};

void reset_counts() {
  for (Counts& c : counts) {
    c.prepares = c.prepared_runs = c.runs = 0;
    c.deadline_unread = true;
  }
  refuse_count = 0;
}

TEST(PreparedCalls, AShapeIsPreparedOnceAndEveryCallOfItRunsThroughThePreparation) {
  register_wrapped<CopyDevice>();
  reset_counts();
  run_ranks(2, {"prepared-copy", "allreduce:copy"}, [&](Communicator& comm) {
    Counts& mine = counts[static_cast<size_t>(comm.rank())];
    std::vector<float> send(3), recv(3), other_send(3), other_recv(3);
    for (int call = 0; call < 5; ++call) {  // the same buffers, new inputs: the shortest path from the second
      send = {float(call), float(comm.rank()), 1.5f};
      comm.all_reduce(send.data(), recv.data(), 2, DataType::kFloat32, ReduceOp::kSum);
      EXPECT_EQ(recv[0], float(call)) << "the call's own input, in its own buffer";
    }
    EXPECT_EQ(mine.prepares, 1);
    EXPECT_EQ(mine.prepared_runs, 5);
    other_send = {7.0f, 8.0f, 9.0f};
    comm.all_reduce(other_send.data(), other_recv.data(), 2, DataType::kFloat32, ReduceOp::kSum);  // new buffers
    EXPECT_EQ(other_recv[1], 8.0f);
    EXPECT_EQ(mine.prepares, 1) << "new buffers of a prepared shape are checked, not prepared again";
    EXPECT_EQ(mine.prepared_runs, 6);
    comm.all_reduce(send.data(), recv.data(), 3, DataType::kFloat32, ReduceOp::kSum);  // another shape
    EXPECT_EQ(mine.prepares, 2);
    EXPECT_EQ(mine.prepared_runs, 7);
    std::vector<uint16_t> halves(2, 0x3c00);  // an f16 average is divided first: not a prepared call
    comm.all_reduce(halves.data(), halves.data(), 2, DataType::kFloat16, ReduceOp::kAvg);
    EXPECT_EQ(mine.runs, 1);
    EXPECT_EQ(mine.prepared_runs, 7);
    EXPECT_TRUE(mine.deadline_unread) << "a prepared call reads its deadline only when a wait needs it";
  });
}

TEST(PreparedCalls, APreparationThatFailsFailsTheCallAndKeepsNothing) {
  register_wrapped<CopyDevice>();
  reset_counts();
  refuse_count = 5;
  run_ranks(2, {"prepared-copy", "allreduce:copy"}, [&](Communicator& comm) {
    Counts& mine = counts[static_cast<size_t>(comm.rank())];
    std::vector<float> send(5, 1.0f), recv(5, 0.0f);
    comm.all_reduce(send.data(), recv.data(), 2, DataType::kFloat32, ReduceOp::kSum);
    for (int attempt = 0; attempt < 2; ++attempt) {  // each time told, never run half-prepared
      const std::string message =
          error_of([&] { comm.all_reduce(send.data(), recv.data(), 5, DataType::kFloat32, ReduceOp::kSum); });
      EXPECT_NE(message.find("this test's refused shape"), std::string::npos) << message;
    }
    EXPECT_EQ(recv[4], 0.0f) << "the refused call ran nothing";
    comm.all_reduce(send.data(), recv.data(), 2, DataType::kFloat32, ReduceOp::kSum);  // the last good shape
    EXPECT_EQ(mine.prepares, 3);
    EXPECT_EQ(mine.prepared_runs, 2) << "the earlier shape still runs prepared";
  });
}

// A prepared call's arguments carry the timeout, and the deadline is read from it when a wait needs one.
TEST(PreparedCalls, TheDeadlineIsTheOneGivenOrNowPlusTheTimeout) {
  transport::CollectiveArgs args;
  const Deadline given = Clock::now() + std::chrono::seconds(3);
  args.deadline = given;
  EXPECT_EQ(transport::call_deadline(args), given) << "a deadline given is kept";
  args.deadline = Deadline::min();
  args.timeout = std::chrono::seconds(5);
  const Deadline before = Clock::now();
  const Deadline read = transport::call_deadline(args);
  EXPECT_GE(read, before + std::chrono::seconds(5));
  EXPECT_LE(read, Clock::now() + std::chrono::seconds(5));
  args.timeout = Clock::duration::max();
  EXPECT_EQ(transport::call_deadline(args), Deadline::max()) << "no timeout";
  args.timeout = Clock::duration::max() - std::chrono::seconds(1);
  EXPECT_EQ(transport::call_deadline(args), Deadline::max()) << "beyond what the clock holds: none";
}

}  // namespace
}  // namespace tbcoll::test
