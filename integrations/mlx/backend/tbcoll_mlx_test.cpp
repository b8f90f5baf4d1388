// The tbcoll backend through MLX's public C++ API, on every rank of a tbcoll-run job (integrations/mlx/test.sh):
//
//   tbcoll-run -n 3 tbcoll_mlx_test            every check below; exit 0 when all passed on this rank
//   tbcoll_mlx_test --no-job                   outside a job: init("tbcoll") strict fails and says how to launch
//
// Checked against references computed on every rank from the same random data (the same key everywhere):
// all_sum/all_max/all_min of every MLX dtype (sizes 0, 1, 7, 1000, 70000; sums that wrap in the integer types),
// all_gather and sum_scatter of every dtype, send/recv between every ordered pair of ranks, split (colors, keys,
// a negative color refused on every rank, the group still usable), send to oneself refused, and
// init(backend="any") picking tbcoll in a process tbcoll-run started. Prints one line per failure, naming it.
#include <cstdio>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "mlx/mlx.h"

namespace mx = mlx::core;
namespace dist = mlx::core::distributed;

namespace {

int failures = 0;
int checks = 0;
int my_rank = 0;

void expect(bool ok, const std::string& what) {
  checks++;
  if (!ok) {
    failures++;
    std::fprintf(stderr, "rank %d: FAIL %s\n", my_rank, what.c_str());
  }
}

std::string describe(const char* op, mx::Dtype dtype, int count) {
  std::ostringstream text;
  text << op << " " << dtype << " x " << count;
  return text.str();
}

// size x count values of dtype, the same on every rank: integers over a range where sums of 2-3 ranks wrap.
mx::array all_ranks_data(mx::Dtype dtype, int size, int count, uint64_t seed) {
  auto [key_a, key_b] = mx::random::split(mx::random::key(seed));
  mx::Shape shape{size, count};
  auto a = mx::random::uniform(shape, mx::float32, key_a);
  auto b = mx::random::uniform(shape, mx::float32, key_b);
  switch (dtype) {
    case mx::bool_:
      return mx::less(a, mx::array(0.5f));
    case mx::int8:
      return mx::astype(mx::subtract(mx::multiply(a, mx::array(250.f)), mx::array(125.f)), dtype);
    case mx::uint8:
      return mx::astype(mx::multiply(a, mx::array(250.f)), dtype);
    case mx::int16:
      return mx::astype(mx::subtract(mx::multiply(a, mx::array(64000.f)), mx::array(32000.f)), dtype);
    case mx::uint16:
      return mx::astype(mx::multiply(a, mx::array(65000.f)), dtype);
    case mx::int32:
    case mx::int64:
      return mx::astype(mx::subtract(mx::multiply(a, mx::array(4e9f)), mx::array(2e9f)), dtype);
    case mx::uint32:
    case mx::uint64:
      return mx::astype(mx::multiply(a, mx::array(4e9f)), dtype);
    case mx::complex64:
      return mx::add(
          mx::astype(mx::multiply(a, mx::array(10.f)), dtype),
          mx::multiply(mx::astype(mx::multiply(b, mx::array(10.f)), dtype), mx::array(mx::complex64_t{0, 1})));
    default:
      return mx::astype(mx::subtract(mx::multiply(a, mx::array(20.f)), mx::array(10.f)), dtype);
  }
}

// Row r of a (ranks x count) array, as a (count,) array (take refuses rows of zero elements).
mx::array row(const mx::array& data, int r) {
  const int count = data.shape(1);
  return mx::reshape(mx::slice(data, {r, 0}, {r + 1, count}), {count});
}

// The reduction over ranks in rank order, by MLX's own element-wise ops (integer sums wrap as tbcoll's do).
mx::array fold(const mx::array& data, int size, const std::function<mx::array(mx::array, mx::array)>& op) {
  mx::array result = row(data, 0);
  for (int r = 1; r < size; r++) result = op(result, row(data, r));
  return result;
}

bool same(const mx::array& got, const mx::array& want) {
  auto dtype = want.dtype();
  if (got.dtype() != dtype || got.shape() != want.shape()) return false;
  if (dtype == mx::float16 || dtype == mx::bfloat16 || dtype == mx::float32 || dtype == mx::float64 ||
      dtype == mx::complex64) {
    const float rtol = dtype == mx::bfloat16 ? 2e-2f : dtype == mx::float16 ? 2e-3f : 1e-5f;
    return mx::allclose(got, want, rtol, 1e-5).item<bool>();
  }
  return mx::array_equal(got, want).item<bool>();
}

const std::vector<mx::Dtype> kDtypes = {mx::bool_,    mx::int8,    mx::uint8,   mx::int16,    mx::uint16,
                                        mx::int32,    mx::uint32,  mx::int64,   mx::uint64,   mx::float16,
                                        mx::bfloat16, mx::float32, mx::float64, mx::complex64};

void check_reductions(const dist::Group& group, uint64_t seed) {
  const int size = group.size(), rank = group.rank();
  for (auto dtype : kDtypes) {
    for (int count : {0, 1, 7, 1000, 70000}) {
      auto data = all_ranks_data(dtype, size, count, seed + count);
      auto mine = row(data, rank);
      const bool is_bool = dtype == mx::bool_;
      auto sum = is_bool ? fold(data, size, [](auto a, auto b) { return mx::logical_or(a, b); })
                         : fold(data, size, [](auto a, auto b) { return mx::add(a, b); });
      auto max = is_bool ? fold(data, size, [](auto a, auto b) { return mx::logical_or(a, b); })
                         : fold(data, size, [](auto a, auto b) { return mx::maximum(a, b); });
      auto min = is_bool ? fold(data, size, [](auto a, auto b) { return mx::logical_and(a, b); })
                         : fold(data, size, [](auto a, auto b) { return mx::minimum(a, b); });
      expect(same(dist::all_sum(mine, group), sum), describe("all_sum", dtype, count));
      expect(same(dist::all_max(mine, group), max), describe("all_max", dtype, count));
      expect(same(dist::all_min(mine, group), min), describe("all_min", dtype, count));
      // An input MLX may donate (a temporary): the reduction runs in place in its buffer.
      auto temporary = is_bool ? mx::logical_or(mine, mx::zeros_like(mine)) : mx::add(mine, mx::zeros_like(mine));
      expect(same(dist::all_sum(temporary, group), sum), describe("all_sum (donated input)", dtype, count));
    }
  }
}

void check_gather_scatter(const dist::Group& group, uint64_t seed) {
  const int size = group.size(), rank = group.rank();
  for (auto dtype : kDtypes) {
    for (int count : {1, 5, 4096}) {
      auto data = all_ranks_data(dtype, size, count, seed + count);
      auto gathered = dist::all_gather(row(data, rank), group);
      expect(same(gathered, mx::reshape(data, {size * count})), describe("all_gather", dtype, count));
      // sum_scatter: rank r gets block r of the sum of every rank's (size x count) input.
      auto inputs = all_ranks_data(dtype, size, size * count, seed + 7 * count);
      auto total = dtype == mx::bool_ ? fold(inputs, size, [](auto a, auto b) { return mx::logical_or(a, b); })
                                      : fold(inputs, size, [](auto a, auto b) { return mx::add(a, b); });
      auto block = mx::slice(total, {rank * count}, {(rank + 1) * count});
      expect(same(dist::sum_scatter(row(inputs, rank), group), block), describe("sum_scatter", dtype, count));
    }
  }
}

// Every ordered pair (src, dst), one after the other: any two ranks talk, not only ring neighbours.
void check_send_recv(const dist::Group& group, uint64_t seed) {
  const int size = group.size(), rank = group.rank();
  for (auto dtype : {mx::float32, mx::bfloat16, mx::int16, mx::complex64, mx::bool_}) {
    auto data = all_ranks_data(dtype, size, 3000, seed);
    for (int src = 0; src < size; src++) {
      for (int dst = 0; dst < size; dst++) {
        if (src == dst) continue;
        if (rank == src) mx::eval(dist::send(row(data, src), dst, group));
        if (rank == dst) {
          auto got = dist::recv_like(row(data, src), src, group);
          std::ostringstream what;
          what << "recv from " << src;
          expect(same(got, row(data, src)), describe(what.str().c_str(), dtype, 3000));
        }
      }
    }
  }
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
}

void check_split(const dist::Group& world) {
  const int size = world.size(), rank = world.rank();
  auto halves = world.split(rank % 2);
  expect(halves.size() == (size + 1 - rank % 2) / 2, "split(rank % 2) size");
  expect(halves.rank() == rank / 2, "split(rank % 2) rank");
  auto ones = mx::ones({100}, mx::int32);
  expect(mx::all(mx::equal(dist::all_sum(ones, halves), mx::array(halves.size()))).item<bool>(),
         "all_sum on split(rank % 2)");
  auto reversed = world.split(0, size - rank);
  expect(reversed.rank() == size - 1 - rank, "split with keys reversing the ranks");
  auto mine = mx::full({10}, rank, mx::int32);
  auto gathered = dist::all_gather(mine, reversed);
  expect(mx::array_equal(mx::take(gathered, 0), mx::array(size - 1)).item<bool>(), "all_gather on reversed split");
  auto refused = error_of([&] { world.split(-1); });
  expect(refused.find("color -1") != std::string::npos, "split(-1) refused on every rank: " + refused);
  expect(mx::all(mx::equal(dist::all_sum(ones, world), mx::array(size))).item<bool>(),
         "all_sum on the world after a refused split");
}

void check_refusals(const dist::Group& world) {
  auto x = mx::ones({4});
  auto to_self = error_of([&] { mx::eval(dist::send(x, world.rank(), world)); });
  expect(to_self.find("cannot send to rank") != std::string::npos, "send to oneself refused: " + to_self);
  auto from_self = error_of([&] { mx::eval(dist::recv_like(x, world.rank(), world)); });
  expect(from_self.find("cannot receive from rank") != std::string::npos, "recv from oneself refused: " + from_self);
  auto out_of_range = error_of([&] { mx::eval(dist::send(x, world.size(), world)); });
  expect(!out_of_range.empty(), "send to rank size refused: " + out_of_range);
}

int no_job() {
  auto strict = error_of([] { dist::init(true, "tbcoll"); });
  expect(strict.find("tbcoll-run") != std::string::npos, "strict init outside a job names tbcoll-run: " + strict);
  expect(dist::init(false, "tbcoll").size() == 1, "init outside a job: a group of one");
  expect(dist::is_available("tbcoll"), "is_available(\"tbcoll\")");
  std::printf("tbcoll_mlx_test --no-job: %d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}

int run_checks() {
  // backend="any" first: in a process tbcoll-run started it must pick tbcoll (then init("tbcoll") is that group).
  auto any = dist::init(false, "any");
  auto world = dist::init(true, "tbcoll");
  my_rank = world.rank();
  expect(any.raw_group() == world.raw_group(), "init(\"any\") picked tbcoll");
  expect(world.size() > 1, "a job of several ranks");
  check_reductions(world, 1);
  check_gather_scatter(world, 2);
  check_send_recv(world, 3);
  check_split(world);
  check_refusals(world);
  // The same reductions on a split group (its own communicator).
  check_reductions(world.split(world.rank() % 2 == 0 ? 0 : 1), 4);
  std::printf("tbcoll_mlx_test rank %d of %d: %d checks, %d failed\n", world.rank(), world.size(), checks, failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return argc > 1 && std::strcmp(argv[1], "--no-job") == 0 ? no_job() : run_checks();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "rank %d: FAIL after %d checks: %s\n", my_rank, checks, error.what());
    return 1;
  }
}
