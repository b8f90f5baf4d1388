// NCCL's API on tbcoll (tbcoll/nccl.h and the C API under it): collectives and communicator creations inside
// groups, one thread driving every rank of ncclCommInitAll, pre-multiplied sums, configs, ncclMemAlloc, streams.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tbcoll/nccl.h"

namespace {

std::string last() { return ncclGetLastError(nullptr); }

// n communicators of one job, all in this process (ncclCommInitAll), destroyed when the test ends.
struct Clique {
  explicit Clique(int n) : comms(static_cast<size_t>(n)) {
    EXPECT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess) << last();
  }
  ~Clique() {
    for (ncclComm_t comm : comms) ncclCommDestroy(comm);
  }
  std::vector<ncclComm_t> comms;
};

}  // namespace

// One thread records a collective per rank, sends and receives between them, and runs it all at ncclGroupEnd: the
// recorded calls touch no buffer before it, and every result is right after it.
TEST(NcclApi, OneThreadDrivesEveryRankThroughAGroup) {
  const int n = 3;
  Clique clique(n);
  const size_t count = 1001;
  std::vector<std::vector<float>> in(n), sum(n), gathered(n), ring(n);
  for (int r = 0; r < n; ++r) {
    in[r].assign(count, static_cast<float>(r + 1));
    sum[r].assign(count, -1.0f);
    gathered[r].assign(count * n, -1.0f);
    ring[r].assign(count, -1.0f);
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) {
    ncclComm_t comm = clique.comms[r];
    ASSERT_EQ(ncclAllReduce(in[r].data(), sum[r].data(), count, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
    ASSERT_EQ(ncclAllGather(in[r].data(), gathered[r].data(), count, ncclFloat, comm, nullptr), ncclSuccess);
    ASSERT_EQ(ncclSend(in[r].data(), count, ncclFloat, (r + 1) % n, comm, nullptr), ncclSuccess) << last();
    ASSERT_EQ(ncclRecv(ring[r].data(), count, ncclFloat, (r + n - 1) % n, comm, nullptr), ncclSuccess) << last();
  }
  EXPECT_EQ(sum[0][0], -1.0f) << "a recorded call ran before ncclGroupEnd";
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << last();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(sum[r][count - 1], 6.0f) << "rank " << r;
    for (int p = 0; p < n; ++p) EXPECT_EQ(gathered[r][p * count + 7], static_cast<float>(p + 1)) << "rank " << r;
    EXPECT_EQ(ring[r][count - 1], static_cast<float>((r + n - 1) % n + 1)) << "rank " << r;
  }
}

// Communicator creations inside a group run at its end, at once: one thread makes every rank of a job.
TEST(NcclApi, CreationsInsideAGroupRunTogetherAtItsEnd) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  std::vector<ncclComm_t> comms(3, nullptr);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 3; ++r) ASSERT_EQ(ncclCommInitRankConfig(&comms[r], 3, id, r, &config), ncclSuccess) << last();
  EXPECT_EQ(comms[0], nullptr) << "made before ncclGroupEnd";
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << last();
  std::vector<int64_t> values = {1, 2, 3};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 3; ++r) {
    ASSERT_NE(comms[r], nullptr);
    ASSERT_EQ(ncclAllReduce(&values[r], &values[r], 1, ncclInt64, ncclMax, comms[r], nullptr), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << last();
  EXPECT_EQ(values, (std::vector<int64_t>{3, 3, 3}));
  for (ncclComm_t comm : comms) EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// A recorded call that fails is returned by ncclGroupEnd with its message; the other ranks' calls still ran and
// failed or finished; nothing is left recorded for the next group.
TEST(NcclApi, ARecordedCallsErrorComesFromGroupEnd) {
  Clique clique(1);
  float x = 1;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, nullptr, nullptr), ncclInvalidArgument) << "NULL: at once";
  EXPECT_EQ(ncclBroadcast(&x, &x, 1, ncclFloat, 5, clique.comms[0], nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  EXPECT_NE(last().find("root 5"), std::string::npos) << last();
  EXPECT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess) << "the failed call stayed recorded";
  tbcollComm_t child = nullptr;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(tbcollCommSplit(clique.comms[0], 0, 0, &child), tbcollInvalidUsage) << "splits wait for nothing";
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
}

// Pre-multiplied sums: each rank's input times its own scalar, summed; in every dtype (integers wrap as their
// products do), for all_reduce, reduce and reduce_scatter, with the scalar read once or at every call.
TEST(NcclApi, PreMulSumScalesEachRanksInputThenSums) {
  const int n = 2;
  Clique clique(n);
  auto all_reduce_with = [&](ncclDataType_t dtype, size_t es, const std::vector<std::vector<uint8_t>>& scalars,
                             const std::vector<std::vector<uint8_t>>& inputs, size_t count) {
    std::vector<std::vector<uint8_t>> out(n, std::vector<uint8_t>(count * es));
    std::vector<ncclRedOp_t> ops(n);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(ncclRedOpCreatePreMulSum(&ops[r], const_cast<uint8_t*>(scalars[r].data()), dtype,
                                         ncclScalarHostImmediate, clique.comms[r]), ncclSuccess) << last();
      EXPECT_GE(static_cast<int>(ops[r]), static_cast<int>(ncclNumOps));
    }
    EXPECT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(ncclAllReduce(inputs[r].data(), out[r].data(), count, dtype, ops[r], clique.comms[r], nullptr),
                ncclSuccess);
    }
    EXPECT_EQ(ncclGroupEnd(), ncclSuccess) << last();
    for (int r = 0; r < n; ++r) EXPECT_EQ(ncclRedOpDestroy(ops[r], clique.comms[r]), ncclSuccess);
    EXPECT_EQ(out[0], out[1]);
    return out[0];
  };
  auto bytes = [](auto value) {
    std::vector<uint8_t> out(sizeof(value));
    std::memcpy(out.data(), &value, sizeof(value));
    return out;
  };
  auto many = [&](auto value, size_t count) {
    std::vector<uint8_t> out;
    for (size_t i = 0; i < count; ++i) {
      const std::vector<uint8_t> one = bytes(value);
      out.insert(out.end(), one.begin(), one.end());
    }
    return out;
  };
  const size_t count = 1500;  // more than one block of scalar copies
  EXPECT_EQ(all_reduce_with(ncclFloat, 4, {bytes(0.5f), bytes(2.0f)}, {many(3.0f, count), many(5.0f, count)}, count),
            many(11.5f, count));
  EXPECT_EQ(all_reduce_with(ncclDouble, 8, {bytes(0.25), bytes(-1.0)}, {many(8.0, count), many(1.0, count)}, count),
            many(1.0, count));
  EXPECT_EQ(all_reduce_with(ncclInt32, 4, {bytes(int32_t{3}), bytes(int32_t{-2})},
                            {many(int32_t{1} << 30, 3), many(int32_t{5}, 3)}, 3),
            many(static_cast<int32_t>((uint32_t{3} << 30) - 10u), 3)) << "products wrap";
  EXPECT_EQ(all_reduce_with(ncclUint8, 1, {bytes(uint8_t{3}), bytes(uint8_t{1})}, {many(uint8_t{100}, 5),
                            many(uint8_t{7}, 5)}, 5), many(uint8_t{51}, 5)) << "(300 + 7) mod 256";
  // f16 and bf16: 1.5 * 2 + 0.5 * 4 = 5
  EXPECT_EQ(all_reduce_with(ncclHalf, 2, {bytes(uint16_t{0x3e00}), bytes(uint16_t{0x3800})},
                            {many(uint16_t{0x4000}, 9), many(uint16_t{0x4400}, 9)}, 9), many(uint16_t{0x4500}, 9));
  EXPECT_EQ(all_reduce_with(ncclBfloat16, 2, {bytes(uint16_t{0x3fc0}), bytes(uint16_t{0x3f00})},
                            {many(uint16_t{0x4000}, 9), many(uint16_t{0x4080}, 9)}, 9), many(uint16_t{0x40a0}, 9));

  // reduce and reduce_scatter, the scalar read by each call (ncclScalarDevice)
  std::vector<float> scalars = {1.0f, 10.0f};
  std::vector<ncclRedOp_t> ops(n);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&ops[r], &scalars[r], ncclFloat, ncclScalarDevice, clique.comms[r]),
              ncclSuccess);
  }
  scalars = {2.0f, 3.0f};  // read at the call, not at creation
  std::vector<float> root_out(4, 0), block(2, 0), other_block(2, 0);
  std::vector<std::vector<float>> inputs = {{1, 2, 3, 4}, {5, 6, 7, 8}};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclReduce(inputs[0].data(), root_out.data(), 4, ncclFloat, ops[0], 0, clique.comms[0], nullptr),
            ncclSuccess);
  ASSERT_EQ(ncclReduce(inputs[1].data(), nullptr, 4, ncclFloat, ops[1], 0, clique.comms[1], nullptr), ncclSuccess);
  ASSERT_EQ(ncclReduceScatter(inputs[0].data(), block.data(), 2, ncclFloat, ops[0], clique.comms[0], nullptr),
            ncclSuccess);
  ASSERT_EQ(ncclReduceScatter(inputs[1].data(), other_block.data(), 2, ncclFloat, ops[1], clique.comms[1], nullptr),
            ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << last();
  EXPECT_EQ(root_out, (std::vector<float>{17, 22, 27, 32}));
  EXPECT_EQ(block, (std::vector<float>{17, 22}));
  EXPECT_EQ(other_block, (std::vector<float>{27, 32}));
  EXPECT_EQ(inputs[0], (std::vector<float>{1, 2, 3, 4})) << "the input is left as it was";
}

// An operator is its communicator's and its dtype's, until destroyed; anything else is a clear error.
TEST(NcclApi, PreMulSumOperatorsAreCheckedWhereUsed) {
  Clique a(1), b(1);
  float scalar = 2, x = 1;
  ncclRedOp_t op = ncclSum;
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, a.comms[0]), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat, op, a.comms[0], nullptr), ncclSuccess) << last();
  EXPECT_EQ(x, 2.0f);
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat, op, b.comms[0], nullptr), ncclInvalidArgument);
  EXPECT_NE(last().find("not made by tbcollRedOpCreatePreMulSum on this communicator"), std::string::npos) << last();
  double y = 1;
  EXPECT_EQ(ncclAllReduce(&y, &y, 1, ncclDouble, op, a.comms[0], nullptr), ncclInvalidArgument);
  EXPECT_NE(last().find("was made for f32, the call's dtype is f64"), std::string::npos) << last();
  EXPECT_EQ(ncclRedOpDestroy(ncclSum, a.comms[0]), ncclInvalidArgument);
  EXPECT_EQ(ncclRedOpDestroy(op, a.comms[0]), ncclSuccess);
  EXPECT_EQ(ncclRedOpDestroy(op, a.comms[0]), ncclInvalidArgument) << "destroyed twice";
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat, op, a.comms[0], nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat8e4m3, ncclScalarDevice, a.comms[0]), ncclInvalidArgument);
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, nullptr, ncclFloat, ncclScalarDevice, a.comms[0]), ncclInvalidArgument);
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, static_cast<ncclScalarResidence_t>(7), a.comms[0]),
            ncclInvalidArgument);
}

// Configs: NCCL's initializer, its net names, a deadline; an uninitialised config or a value out of range is refused
// naming the field.
TEST(NcclApi, ConfigsAreCheckedAndApplied) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  ncclConfig_t garbage;
  std::memset(&garbage, 0, sizeof(garbage));
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &garbage), ncclInvalidArgument);
  EXPECT_NE(last().find("NCCL_CONFIG_INITIALIZER"), std::string::npos) << last();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 2;
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclInvalidArgument);
  EXPECT_NE(last().find("config.blocking 2"), std::string::npos) << last();
  config.blocking = 0;
  config.netName = "Socket";
  config.maxCTAs = 16;  // a GPU field: accepted, meaningless here
  ASSERT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclSuccess) << last();
  ncclResult_t state = ncclInProgress;
  EXPECT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
  EXPECT_EQ(state, ncclSuccess) << "creation finishes before the call returns";
  ncclComm_t child = nullptr;
  EXPECT_EQ(ncclCommSplit(comm, 0, 0, &child, &garbage), ncclInvalidArgument);
  EXPECT_EQ(ncclCommSplit(comm, 0, 0, &child, &config), ncclSuccess) << last();
  EXPECT_NE(child, nullptr);
  EXPECT_EQ(ncclCommDestroy(child), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  ncclUniqueId other;
  ASSERT_EQ(ncclGetUniqueId(&other), ncclSuccess);
  config.netName = "no-such-transport";
  std::vector<ncclComm_t> pair(2, nullptr);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) ASSERT_EQ(ncclCommInitRankConfig(&pair[r], 2, other, r, &config), ncclSuccess);
  EXPECT_NE(ncclGroupEnd(), ncclSuccess);
  EXPECT_NE(last().find("no-such-transport"), std::string::npos) << last();
  EXPECT_EQ(pair, (std::vector<ncclComm_t>{nullptr, nullptr}));
}

// ncclMemAlloc: zeroed page-aligned memory its communicators can register; ncclMemFree takes only its own, once.
TEST(NcclApi, MemAllocGivesAlignedRegistrableMemory) {
  void* ptr = nullptr;
  ASSERT_EQ(ncclMemAlloc(&ptr, 10000), ncclSuccess) << last();
  ASSERT_NE(ptr, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(sysconf(_SC_PAGESIZE)), 0u);
  EXPECT_EQ(static_cast<unsigned char*>(ptr)[9999], 0);
  Clique clique(1);
  void* handle = nullptr;
  EXPECT_EQ(ncclCommRegister(clique.comms[0], ptr, 10000, &handle), ncclSuccess) << last();
  EXPECT_EQ(ncclCommDeregister(clique.comms[0], handle), ncclSuccess);
  int local = 0;
  EXPECT_EQ(ncclMemFree(&local), ncclInvalidArgument);
  EXPECT_EQ(ncclMemFree(ptr), ncclSuccess);
  EXPECT_EQ(ncclMemFree(ptr), ncclInvalidArgument) << "freed twice";
  EXPECT_NE(last().find("freed already"), std::string::npos) << last();
  EXPECT_EQ(ncclMemFree(nullptr), ncclSuccess);
  EXPECT_EQ(ncclMemAlloc(&ptr, 0), ncclInvalidArgument);
}

// A stream is refused with a message; NCCL's result numbers come back (a deadline is ncclTimeout, 8).
TEST(NcclApi, StreamsAreRefusedAndResultsAreNcclsNumbers) {
  Clique clique(1);
  float x = 1;
  auto stream = reinterpret_cast<cudaStream_t>(uintptr_t{64});
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, clique.comms[0], stream), ncclInvalidArgument);
  EXPECT_NE(last().find("ncclAllReduce: stream"), std::string::npos) << last();
  EXPECT_EQ(static_cast<int>(tbcoll_nccl_result(tbcollTimeout)), 8);
  EXPECT_EQ(static_cast<int>(tbcoll_nccl_result(tbcollInProgress)), 7);
  int version = 0;
  EXPECT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, NCCL_VERSION(2, 28, 0));
  EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat8e5m2, ncclSum, clique.comms[0], nullptr), ncclInvalidArgument);
  std::vector<ncclComm_t> none(2);
  const int same[2] = {1, 1};
  EXPECT_EQ(ncclCommInitAll(none.data(), 2, same), ncclInvalidArgument);
  EXPECT_NE(last().find("devlist[1] = 1"), std::string::npos) << last();
}
