// tbcoll-perf's check (benchmarks/perf_check.h): it passes results reduced the library's way in any rank order, for
// every dtype, op and a range of world sizes, and it catches the data-movement mistakes a broken collective makes.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "benchmarks/perf_check.h"
#include "reduce/reduce.h"

namespace tbcoll::bench {
namespace {

using Bytes = std::vector<uint8_t>;

const DataType kDtypes[] = {DataType::kInt8,  DataType::kUint8,   DataType::kInt32,    DataType::kUint32,
                            DataType::kInt64, DataType::kUint64,  DataType::kFloat16,  DataType::kBfloat16,
                            DataType::kFloat32, DataType::kFloat64};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};

Bytes input(const CheckSpec& spec, int rank, size_t elements) {
  Bytes data(elements * dtype_size(spec.dtype));
  fill_input(spec, rank, data.data(), elements);
  return data;
}

// The reduction of the given ranks' inputs with the library's kernels, in the given order (f16 averages divide
// first, the others divide the sum).
Bytes reduce_ranks(const CheckSpec& spec, const std::vector<int>& ranks, size_t elements) {
  const bool divide_first = spec.op == ReduceOp::kAvg && spec.dtype == DataType::kFloat16;
  const ReduceOp op = spec.op == ReduceOp::kAvg ? ReduceOp::kSum : spec.op;
  Bytes acc;
  for (int r : ranks) {
    Bytes in = input(spec, r, elements);
    if (divide_first) reduce::divide(in.data(), in.data(), elements, spec.dtype, spec.world_size);
    if (acc.empty()) acc = in;
    else reduce::apply(acc.data(), acc.data(), in.data(), elements, spec.dtype, op);
  }
  if (spec.op == ReduceOp::kAvg && !divide_first) {
    reduce::divide(acc.data(), acc.data(), elements, spec.dtype, spec.world_size);
  }
  return acc;
}

std::vector<int> all_ranks(int n, bool reversed) {
  std::vector<int> ranks(n);
  std::iota(ranks.begin(), ranks.end(), 0);
  if (reversed) std::reverse(ranks.begin(), ranks.end());
  return ranks;
}

TEST(PerfCheck, PassesCorrectReductionsInAnyOrder) {
  const size_t count = 301;
  for (int n : {1, 2, 3, 8, 64}) {
    for (DataType dtype : kDtypes) {
      for (ReduceOp op : kOps) {
        CheckSpec spec{Collective::kAllReduce, dtype, op, n, 0};
        for (bool reversed : {false, true}) {
          Bytes got = reduce_ranks(spec, all_ranks(n, reversed), count);
          EXPECT_EQ(count_wrong(spec, n - 1, got.data(), count), 0)
              << to_string(dtype) << " " << to_string(op) << " n=" << n << (reversed ? " reversed" : "");
        }
      }
    }
  }
}

TEST(PerfCheck, CatchesARankUsedTwiceOrMissing) {
  const size_t count = 1000;
  for (DataType dtype : kDtypes) {
    for (ReduceOp op : kOps) {
      CheckSpec spec{Collective::kAllReduce, dtype, op, 4, 0};
      Bytes twice = reduce_ranks(spec, {0, 1, 2, 0}, count);
      EXPECT_GT(count_wrong(spec, 0, twice.data(), count), 0) << to_string(dtype) << " " << to_string(op);
      spec.world_size = 8;
      Bytes missing = reduce_ranks(spec, {0, 1, 2, 3, 4, 5, 7}, count);
      EXPECT_GT(count_wrong(spec, 0, missing.data(), count), 0) << to_string(dtype) << " " << to_string(op);
    }
  }
  CheckSpec large{Collective::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 160, 0};
  std::vector<int> ranks = all_ranks(160, false);
  ranks.erase(ranks.begin() + 5);
  EXPECT_GT(count_wrong(large, 0, reduce_ranks(large, ranks, count).data(), count), 0);
}

TEST(PerfCheck, CatchesMisplacedChunksAndBlocks) {
  CheckSpec spec{Collective::kAllReduce, DataType::kInt32, ReduceOp::kSum, 2, 0};
  Bytes result = reduce_ranks(spec, {0, 1}, 12);
  std::rotate(result.begin(), result.begin() + 6 * 4, result.end());  // halves swapped
  EXPECT_EQ(count_wrong(spec, 0, result.data(), 12), 12);

  // all_gather: block 3 holds rank 0's data.
  CheckSpec gather{Collective::kAllGather, DataType::kFloat16, ReduceOp::kSum, 4, 0};
  const size_t count = 300;
  Bytes gathered;
  for (int r : {0, 1, 2, 0}) {
    Bytes block = input(gather, r, count);
    gathered.insert(gathered.end(), block.begin(), block.end());
  }
  EXPECT_GT(count_wrong(gather, 2, gathered.data(), count), count / 2);

  // broadcast in place: a rank that received nothing still holds its own input.
  CheckSpec broadcast{Collective::kBroadcast, DataType::kUint8, ReduceOp::kSum, 4, 0};
  EXPECT_GT(count_wrong(broadcast, 3, input(broadcast, 3, count).data(), count), count / 2);
  EXPECT_EQ(count_wrong(broadcast, 3, input(broadcast, 0, count).data(), count), 0);

  // reduce_scatter: rank 1 given block 0 of the reduction instead of block 1.
  CheckSpec scatter{Collective::kReduceScatter, DataType::kInt8, ReduceOp::kMax, 3, 0};
  const size_t block = 1001;
  Bytes full = reduce_ranks(scatter, {0, 1, 2}, 3 * block);
  EXPECT_EQ(count_wrong(scatter, 1, full.data() + block, block), 0);
  EXPECT_GT(count_wrong(scatter, 1, full.data(), block), block / 2);

  // reduce: the root is checked, the other ranks are not.
  CheckSpec to_root{Collective::kReduce, DataType::kBfloat16, ReduceOp::kSum, 3, 2};
  Bytes wrong_data = input(to_root, 0, count);
  EXPECT_GT(count_wrong(to_root, 2, wrong_data.data(), count), 0);
  EXPECT_EQ(count_wrong(to_root, 1, wrong_data.data(), count), 0);
}

// all_to_all, gather and scatter: the right blocks pass, a block from the wrong rank or place is caught.
TEST(PerfCheck, CatchesWrongBlocksOfTheExchanges) {
  const int n = 3;
  const size_t count = 257;
  const size_t es = 4;
  CheckSpec a2a{Collective::kAllToAll, DataType::kFloat32, ReduceOp::kSum, n, 0};
  std::vector<Bytes> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(input(a2a, r, n * count));
  Bytes received;  // rank 1's result: block 1 of every rank's input
  for (int r = 0; r < n; ++r) {
    received.insert(received.end(), inputs[r].begin() + es * count, inputs[r].begin() + 2 * es * count);
  }
  EXPECT_EQ(count_wrong(a2a, 1, received.data(), count), 0);
  EXPECT_GT(count_wrong(a2a, 2, received.data(), count), static_cast<long long>(count)) << "rank 2's blocks differ";
  CheckSpec gather{Collective::kGather, DataType::kInt32, ReduceOp::kSum, n, 1};
  Bytes gathered;
  for (int r : {0, 1, 1}) {  // block 2 holds rank 1's data
    Bytes block = input(gather, r, count);
    gathered.insert(gathered.end(), block.begin(), block.end());
  }
  EXPECT_GT(count_wrong(gather, 1, gathered.data(), count), static_cast<long long>(count / 2));
  EXPECT_EQ(count_wrong(gather, 0, gathered.data(), count), 0) << "only the root is checked";
  CheckSpec scatter{Collective::kScatter, DataType::kUint8, ReduceOp::kSum, n, 2};
  const Bytes root_input = input(scatter, 2, n * count);
  EXPECT_EQ(count_wrong(scatter, 1, root_input.data() + count, count), 0);
  EXPECT_GT(count_wrong(scatter, 1, root_input.data(), count), static_cast<long long>(count / 2));
}

// Integer results wrap as the library documents: an 8-rank int8 product or sum is checked modulo 256.
TEST(PerfCheck, IntegerResultsWrapAround) {
  for (ReduceOp op : {ReduceOp::kProd, ReduceOp::kSum, ReduceOp::kAvg}) {
    CheckSpec spec{Collective::kAllReduce, DataType::kInt8, op, 200, 0};
    Bytes got = reduce_ranks(spec, all_ranks(200, false), 257);
    EXPECT_EQ(count_wrong(spec, 0, got.data(), 257), 0) << to_string(op);
  }
}

}  // namespace
}  // namespace tbcoll::bench
