#include "collectives/harness.h"

#include <dirent.h>

#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "reduce/reduce.h"

namespace tbcoll::test {

void run_ranks(int n, const RankOptions& options, const std::function<void(Communicator&)>& body) {
  static std::atomic<int> generation{0};
  auto store = make_in_memory_store();
  std::string prefix = fmt::format("test{}", generation++);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        Config config;
        config.rank = rank;
        config.world_size = n;
        config.store = store;
        config.prefix = prefix;
        config.transport = options.transport;
        config.algo = options.algo_per_rank.empty() ? options.algo : options.algo_per_rank[rank];
        config.timeout_s = options.timeout_s;
        config.knobs = options.knobs;
        if (!options.knobs_per_rank.empty()) {
          for (const auto& [name, value] : options.knobs_per_rank[static_cast<size_t>(rank)]) config.knobs[name] = value;
        }
        Communicator comm = Communicator::init(config);
        body(comm);
      } catch (const std::exception& error) {
        errors[rank] = error.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int rank = 0; rank < n; ++rank) {
    EXPECT_EQ(errors[rank], "") << "rank " << rank << " of " << n << " over " << options.transport;
  }
}

std::vector<DataType> all_dtypes() {
  std::vector<DataType> out;
  for (int i = 0; i < kNumDataTypes; ++i) out.push_back(static_cast<DataType>(i));
  return out;
}

std::vector<ReduceOp> all_ops() {
  std::vector<ReduceOp> out;
  for (int i = 0; i < kNumReduceOps; ++i) out.push_back(static_cast<ReduceOp>(i));
  return out;
}

namespace {


// Small integers: -2..2 for signed types, 0..4 for unsigned ones; never 0 for a quarter of positions so
// products stay interesting.
int64_t value(DataType dtype, int rank, size_t i, int salt) {
  int64_t v = static_cast<int64_t>((static_cast<size_t>(rank) * 7 + i * 3 + static_cast<size_t>(salt) * 5) % 5);
  return is_unsigned(dtype) ? v : v - 2;
}

void store_value(DataType dtype, uint8_t* at, double v) {
  switch (dtype) {
    case DataType::kInt8: { int8_t x = static_cast<int8_t>(static_cast<int64_t>(v)); std::memcpy(at, &x, 1); break; }
    case DataType::kUint8: { uint8_t x = static_cast<uint8_t>(static_cast<int64_t>(v)); std::memcpy(at, &x, 1); break; }
    case DataType::kInt32: { int32_t x = static_cast<int32_t>(static_cast<int64_t>(v)); std::memcpy(at, &x, 4); break; }
    case DataType::kUint32: { uint32_t x = static_cast<uint32_t>(static_cast<int64_t>(v)); std::memcpy(at, &x, 4); break; }
    case DataType::kInt64: { int64_t x = static_cast<int64_t>(v); std::memcpy(at, &x, 8); break; }
    case DataType::kUint64: { uint64_t x = static_cast<uint64_t>(static_cast<int64_t>(v)); std::memcpy(at, &x, 8); break; }
    case DataType::kFloat16: { uint16_t x = reduce::float_to_half(static_cast<float>(v)); std::memcpy(at, &x, 2); break; }
    case DataType::kBfloat16: { uint16_t x = reduce::float_to_bf16(static_cast<float>(v)); std::memcpy(at, &x, 2); break; }
    case DataType::kFloat32: { float x = static_cast<float>(v); std::memcpy(at, &x, 4); break; }
    case DataType::kFloat64: std::memcpy(at, &v, 8); break;
  }
}

double load_value(DataType dtype, const uint8_t* at) {
  switch (dtype) {
    case DataType::kInt8: { int8_t x; std::memcpy(&x, at, 1); return x; }
    case DataType::kUint8: { uint8_t x; std::memcpy(&x, at, 1); return x; }
    case DataType::kInt32: { int32_t x; std::memcpy(&x, at, 4); return x; }
    case DataType::kUint32: { uint32_t x; std::memcpy(&x, at, 4); return x; }
    case DataType::kInt64: { int64_t x; std::memcpy(&x, at, 8); return static_cast<double>(x); }
    case DataType::kUint64: { uint64_t x; std::memcpy(&x, at, 8); return static_cast<double>(x); }
    case DataType::kFloat16: { uint16_t x; std::memcpy(&x, at, 2); return reduce::half_to_float(x); }
    case DataType::kBfloat16: { uint16_t x; std::memcpy(&x, at, 2); return reduce::bf16_to_float(x); }
    case DataType::kFloat32: { float x; std::memcpy(&x, at, 4); return x; }
    case DataType::kFloat64: { double x; std::memcpy(&x, at, 8); return x; }
  }
  return 0;
}

}  // namespace

std::vector<uint8_t> make_input(DataType dtype, int rank, size_t count, int salt) {
  size_t es = dtype_size(dtype);
  std::vector<uint8_t> out(count * es);
  for (size_t i = 0; i < count; ++i) store_value(dtype, out.data() + i * es, static_cast<double>(value(dtype, rank, i, salt)));
  return out;
}

std::vector<uint8_t> reference_all_reduce(DataType dtype, ReduceOp op, int n, size_t count, int salt) {
  size_t es = dtype_size(dtype);
  std::vector<uint8_t> out(count * es);
  for (size_t i = 0; i < count; ++i) {
    // Values are small integers: int64 arithmetic is exact; the cast in store_value wraps like the kernels.
    int64_t acc = value(dtype, 0, i, salt);
    for (int r = 1; r < n; ++r) {
      int64_t v = value(dtype, r, i, salt);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg: acc += v; break;
        case ReduceOp::kProd: acc *= v; break;
        case ReduceOp::kMax: acc = std::max(acc, v); break;
        case ReduceOp::kMin: acc = std::min(acc, v); break;
      }
    }
    double result = static_cast<double>(acc);
    if (op == ReduceOp::kAvg) {
      result = is_floating_point(dtype) ? result / n : static_cast<double>(acc / n);
    }
    store_value(dtype, out.data() + i * es, result);
  }
  return out;
}

size_t count_wrong(DataType dtype, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) return std::max(got.size(), want.size());
  size_t es = dtype_size(dtype);
  double tolerance = dtype == DataType::kBfloat16 ? 1e-2 : dtype == DataType::kFloat16 ? 1e-3
                     : dtype == DataType::kFloat32 ? 1e-6 : 0;
  size_t wrong = 0;
  for (size_t i = 0; i < got.size() / es; ++i) {
    if (!is_floating_point(dtype)) {
      wrong += std::memcmp(got.data() + i * es, want.data() + i * es, es) != 0;
    } else {
      double g = load_value(dtype, got.data() + i * es), w = load_value(dtype, want.data() + i * es);
      wrong += !(std::fabs(g - w) <= tolerance * std::max(1.0, std::fabs(w)));
    }
  }
  return wrong;
}

size_t entries_of(const char* dir) {
  size_t count = 0;
  if (DIR* d = opendir(dir)) {
    while (readdir(d) != nullptr) ++count;
    closedir(d);
  }
  return count;
}

std::vector<std::string> init_errors(int n, const std::function<Config(int rank)>& config_of) {
  auto store = make_in_memory_store();
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      Config config = config_of(rank);
      config.store = store;
      errors[static_cast<size_t>(rank)] = error_of([&] { Communicator::init(config); });
    });
  }
  for (auto& thread : threads) thread.join();
  return errors;
}

}  // namespace tbcoll::test
