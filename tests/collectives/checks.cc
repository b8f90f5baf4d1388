// Checks of each collective against a reference (harness.h's inputs), shared by the collective suites.
#include "collectives/checks.h"

#include <gtest/gtest.h>

#include <cstring>

#include <fmt/format.h>

#include "collectives/harness.h"

namespace tbcoll::test {

// all_reduce of make_input(salt) checked against the reference, out of place and in place; also checks that
// all ranks hold bitwise identical results (gathering them with all_gather).
void check_all_reduce(Communicator& comm, DataType dtype, ReduceOp op, size_t count, int salt) {
  SCOPED_TRACE(fmt::format("all_reduce count={} {} {} n={}", count, to_string(dtype), to_string(op), comm.size()));
  const size_t bytes = count * dtype_size(dtype);
  std::vector<uint8_t> input = make_input(dtype, comm.rank(), count, salt);
  std::vector<uint8_t> want = reference_all_reduce(dtype, op, comm.size(), count, salt);
  std::vector<uint8_t> out(bytes + 1, 0xAB);  // one guard byte past the end
  comm.all_reduce(input.data(), out.data(), count, dtype, op);
  EXPECT_EQ(out[bytes], 0xAB) << "wrote past the end";
  out.resize(bytes);
  EXPECT_EQ(count_wrong(dtype, out, want), 0u) << "out of place";
  std::vector<uint8_t> in_place = input;
  comm.all_reduce(in_place.data(), in_place.data(), count, dtype, op);
  EXPECT_EQ(in_place, out) << "in place differs from out of place";
  if (count > 0) {
    std::vector<uint8_t> everyone(bytes * comm.size());
    comm.all_gather(out.data(), everyone.data(), bytes, DataType::kUint8);
    for (int r = 0; r < comm.size(); ++r) {
      EXPECT_EQ(0, std::memcmp(everyone.data() + r * bytes, out.data(), bytes)) << "rank " << r << " differs";
    }
  }
}

void check_all_gather(Communicator& comm, DataType dtype, size_t count) {
  SCOPED_TRACE(fmt::format("all_gather count={} {} n={}", count, to_string(dtype), comm.size()));
  const size_t bytes = count * dtype_size(dtype);
  const int n = comm.size();
  std::vector<uint8_t> want;
  for (int r = 0; r < n; ++r) {
    auto block = make_input(dtype, r, count, 3);
    want.insert(want.end(), block.begin(), block.end());
  }
  std::vector<uint8_t> input = make_input(dtype, comm.rank(), count, 3);
  std::vector<uint8_t> out(bytes * n + 1, 0xCD);
  comm.all_gather(input.data(), out.data(), count, dtype);
  EXPECT_EQ(out[bytes * n], 0xCD) << "wrote past the end";
  out.resize(bytes * n);
  EXPECT_EQ(out, want) << "out of place";
  std::vector<uint8_t> in_place(bytes * n, 0);
  if (bytes > 0) std::memcpy(in_place.data() + comm.rank() * bytes, input.data(), bytes);
  comm.all_gather(in_place.data() + comm.rank() * bytes, in_place.data(), count, dtype);
  EXPECT_EQ(in_place, want) << "in place";
}

void check_broadcast(Communicator& comm, DataType dtype, size_t count, int root) {
  SCOPED_TRACE(fmt::format("broadcast count={} {} root={} n={}", count, to_string(dtype), root, comm.size()));
  std::vector<uint8_t> want = make_input(dtype, root, count, 1);
  std::vector<uint8_t> mine = make_input(dtype, comm.rank(), count, 1);
  std::vector<uint8_t> out(want.size(), 0);
  comm.broadcast(mine.data(), out.data(), count, dtype, root);
  EXPECT_EQ(out, want) << "out of place";
  comm.broadcast(mine.data(), mine.data(), count, dtype, root);
  EXPECT_EQ(mine, want) << "in place";
}

// reduce_scatter: rank r's input is make_input of n*count elements; rank r gets block r of the full reduction.
void check_reduce_scatter(Communicator& comm, DataType dtype, ReduceOp op, size_t count, int salt) {
  SCOPED_TRACE(fmt::format("reduce_scatter count={} {} {} n={}", count, to_string(dtype), to_string(op), comm.size()));
  const int n = comm.size(), r = comm.rank();
  const size_t es = dtype_size(dtype), block = count * es;
  std::vector<uint8_t> input = make_input(dtype, r, count * n, salt);
  std::vector<uint8_t> full = reference_all_reduce(dtype, op, n, count * n, salt);
  std::vector<uint8_t> want(full.begin() + r * block, full.begin() + (r + 1) * block);
  std::vector<uint8_t> out(block + 1, 0xEE);
  comm.reduce_scatter(input.data(), out.data(), count, dtype, op);
  EXPECT_EQ(out[block], 0xEE) << "wrote past the end";
  out.resize(block);
  EXPECT_EQ(count_wrong(dtype, out, want), 0u) << "out of place";
  comm.reduce_scatter(input.data(), input.data() + r * block, count, dtype, op);  // in place, as in NCCL
  std::vector<uint8_t> in_place(input.begin() + r * block, input.begin() + (r + 1) * block);
  EXPECT_EQ(count_wrong(dtype, in_place, want), 0u) << "in place";
}

void check_reduce(Communicator& comm, DataType dtype, ReduceOp op, size_t count, int root) {
  SCOPED_TRACE(fmt::format("reduce count={} {} {} root={} n={}", count, to_string(dtype), to_string(op), root,
                           comm.size()));
  std::vector<uint8_t> input = make_input(dtype, comm.rank(), count, root);
  std::vector<uint8_t> want = reference_all_reduce(dtype, op, comm.size(), count, root);
  std::vector<uint8_t> out(want.size(), 0);
  comm.reduce(input.data(), comm.rank() == root ? out.data() : nullptr, count, dtype, op, root);
  if (comm.rank() == root) {
    EXPECT_EQ(count_wrong(dtype, out, want), 0u) << "out of place";
  }
  comm.reduce(input.data(), input.data(), count, dtype, op, root);
  if (comm.rank() == root) {
    EXPECT_EQ(count_wrong(dtype, input, want), 0u) << "in place";
  }
}

void check_send_recv(Communicator& comm, size_t count) {
  // Shift around the ring: even ranks send first, odd ranks receive first (no deadlock for any n).
  const int n = comm.size(), r = comm.rank();
  if (n == 1) return;
  std::vector<uint8_t> mine = make_input(DataType::kInt32, r, count, 2);
  std::vector<uint8_t> got(mine.size(), 0);
  int to = (r + 1) % n, from = (r + n - 1) % n;
  if (r % 2 == 0) {
    comm.send(mine.data(), count, DataType::kInt32, to);
    comm.recv(got.data(), count, DataType::kInt32, from);
  } else {
    comm.recv(got.data(), count, DataType::kInt32, from);
    comm.send(mine.data(), count, DataType::kInt32, to);
  }
  EXPECT_EQ(got, make_input(DataType::kInt32, from, count, 2)) << "send/recv count=" << count;
}

}  // namespace tbcoll::test
