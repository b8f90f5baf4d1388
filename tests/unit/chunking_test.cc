// Slice maths shared by the schedules and the shm fast paths, and the rank-order reduction helper.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "algorithms/chunking.h"
#include "reduce/reduce.h"

namespace tbcoll {
namespace {

TEST(Chunking, AlignedSegmentsCoverEverythingOnceInWholeLines) {
  for (size_t align : {size_t{1}, size_t{8}, size_t{16}, size_t{64}}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{1000}, size_t{4099}}) {
      for (int parts : {1, 2, 3, 5, 8}) {
        size_t next = 0;
        for (int i = 0; i < parts; ++i) {
          const algo::Piece piece = algo::aligned_segment(count, parts, i, align);
          EXPECT_EQ(piece.offset, next) << count << "/" << parts << " part " << i;
          if (piece.count > 0) {
            EXPECT_EQ(piece.offset % align, 0u) << "starts on a line";
          }
          next = piece.offset + piece.count;
        }
        EXPECT_EQ(next, count) << "align " << align << ", count " << count << ", parts " << parts;
      }
    }
  }
  // 100 floats over 3 ranks in 16-float lines: 48, 48, 4.
  EXPECT_EQ(algo::aligned_segment(100, 3, 0, 16).count, 48u);
  EXPECT_EQ(algo::aligned_segment(100, 3, 2, 16).offset, 96u);
  EXPECT_EQ(algo::aligned_segment(100, 3, 2, 16).count, 4u);
}

TEST(ReduceRanks, FoldsInRankOrderWithTwoBuffersTakingTurns) {
  // f32 sums whose result depends on the order: ((1e8 + 1) + -1e8) + 1 = 1 in f32, not 2.
  const std::vector<float> inputs = {1e8f, 1.0f, -1e8f, 1.0f};
  float buffers[2] = {};
  float out = -7;
  std::vector<int> asked;
  reduce::reduce_ranks(&out, 4, 1, DataType::kFloat32, ReduceOp::kSum,
                       reduce::kernel(DataType::kFloat32, ReduceOp::kSum), [&](int p) {
                         asked.push_back(p);
                         buffers[p & 1] = inputs[static_cast<size_t>(p)];  // valid until input(p + 2)
                         return &buffers[p & 1];
                       });
  EXPECT_EQ(asked, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(out, ((1e8f + 1.0f) + -1e8f) + 1.0f);
  int32_t values[3] = {3, 5, 7}, avg = 0;
  reduce::reduce_ranks(&avg, 3, 1, DataType::kInt32, ReduceOp::kAvg, reduce::kernel(DataType::kInt32, ReduceOp::kAvg),
                       [&](int p) { return &values[p]; });
  EXPECT_EQ(avg, 5);
}

}  // namespace
}  // namespace tbcoll
