// Reduction kernels against scalar references written independently here: integers through 128-bit arithmetic,
// f16/bf16 through a double-based conversion (ldexp / nearbyint) that shares no code with the kernels' bit tricks.
// Every dtype x op x instruction set, odd counts, misaligned pointers, exact aliasing, guard elements after the end.
#include "reduce/reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace tbcoll::reduce {
namespace {

template <class To, class From>
To bits_as(From from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof(to));
  return to;
}

// ---- reference conversions ----------------------------------------------------------------------------------

// IEEE binary16 (5 exponent bits, 10 mantissa bits) and bfloat16 (8, 7), decoded and encoded with plain double
// arithmetic. Encoding rounds once, to nearest even, through nearbyint in the default rounding mode.
template <int kExpBits, int kMantBits>
double ref_to_double(uint16_t v) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1, kMaxExp = (1 << kExpBits) - 1;
  const int exponent = (v >> kMantBits) & kMaxExp;
  const int mantissa = v & ((1 << kMantBits) - 1);
  double magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(mantissa, 1 - kBias - kMantBits);
  } else if (exponent == kMaxExp) {
    magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    magnitude = std::ldexp((1 << kMantBits) + mantissa, exponent - kBias - kMantBits);
  }
  return (v & 0x8000) ? -magnitude : magnitude;
}

template <int kExpBits, int kMantBits>
uint16_t ref_from_double(double d) {
  constexpr int kBias = (1 << (kExpBits - 1)) - 1, kMaxExp = (1 << kExpBits) - 1, kMinExponent = 1 - kBias;
  if (std::isnan(d)) return 0x7fff & ~((1 << (kMantBits - 1)) - 1);  // the quiet NaN: 0x7e00, 0x7fc0
  const uint16_t sign = std::signbit(d) ? 0x8000 : 0;
  const double magnitude = std::fabs(d);
  // Halfway between the largest finite value (odd mantissa) and the next binade: ties to even, i.e. to inf.
  if (magnitude >= std::ldexp(2 - std::ldexp(1, -kMantBits - 1), kBias)) return sign | (kMaxExp << kMantBits);
  if (magnitude < std::ldexp(1, kMinExponent)) {  // subnormal (or rounds up to the smallest normal, same encoding)
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(magnitude, kMantBits - kMinExponent)));
  }
  int exponent = std::ilogb(magnitude);
  double significand = std::nearbyint(std::ldexp(magnitude, kMantBits - exponent));
  if (significand == (2 << kMantBits)) {
    significand /= 2;
    ++exponent;
  }
  return sign |
         static_cast<uint16_t>(((exponent + kBias) << kMantBits) | (static_cast<int>(significand) - (1 << kMantBits)));
}

template <int kExpBits, int kMantBits>
bool ref_is_nan(uint16_t v) {
  return (v & 0x7fff) > (((1 << kExpBits) - 1) << kMantBits);
}

const auto ref_half_to_double = ref_to_double<5, 10>;
const auto ref_double_to_half = ref_from_double<5, 10>;
const auto is_half_nan = ref_is_nan<5, 10>;
const auto ref_bf16_to_double = ref_to_double<8, 7>;
const auto ref_double_to_bf16 = ref_from_double<8, 7>;
const auto is_bf16_nan = ref_is_nan<8, 7>;

// ---- reference element types ----------------------------------------------------------------------------------

// The reference result of a op b. Max/min: NaN if either side is NaN, else (a > b ? a : b) / (a < b ? a : b).
template <class T>
T ref_float_op(ReduceOp op, T a, T b) {
  if (op == ReduceOp::kSum || op == ReduceOp::kAvg) return a + b;
  if (op == ReduceOp::kProd) return a * b;
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  return op == ReduceOp::kMax ? (a > b ? a : b) : (a < b ? a : b);
}

template <class T>
struct IntRef {
  using Storage = T;
  static std::vector<T> specials() {
    return {0, 1, static_cast<T>(-1), std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), 2, 3};
  }
  static T random(std::mt19937_64& rng) { return static_cast<T>(rng()); }
  static T combine(ReduceOp op, T a, T b) {
    // Sum and product modulo 2^128, then truncated: wrap-around computed without the kernels' tricks.
    const auto x = static_cast<unsigned __int128>(static_cast<__int128>(a));
    const auto y = static_cast<unsigned __int128>(static_cast<__int128>(b));
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) return static_cast<T>(static_cast<uint64_t>(x + y));
    if (op == ReduceOp::kProd) return static_cast<T>(static_cast<uint64_t>(x * y));
    return op == ReduceOp::kMax ? (a > b ? a : b) : (a < b ? a : b);
  }
  static bool same(T expected, T got) { return expected == got; }
  static std::string show(T v) { return std::to_string(static_cast<long long>(v)) + " / " + std::to_string(+v); }
};

template <class T>
struct FloatRef {
  using Storage = T;
  static std::vector<T> specials() {
    using L = std::numeric_limits<T>;
    return {T(0),           -T(0),           T(1),     T(-2.5),    L::infinity(), -L::infinity(),
            L::quiet_NaN(), L::denorm_min(), L::max(), L::lowest()};
  }
  static T random(std::mt19937_64& rng) {
    if (rng() % 8 == 0) {  // any bit pattern: NaNs, infinities, subnormals, huge and tiny values
      using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
      return bits_as<T>(static_cast<Bits>(rng()));
    }
    return std::uniform_real_distribution<T>(-100, 100)(rng);
  }
  static T combine(ReduceOp op, T a, T b) { return ref_float_op(op, a, b); }
  static bool same(T expected, T got) {
    return std::isnan(expected) ? std::isnan(got) : std::memcmp(&expected, &got, sizeof(T)) == 0;
  }
  static std::string show(T v) { return std::to_string(v); }
};

// f16 and bf16: the reference works in double and rounds once. f32's 24 bits are >= 2p+2 for both formats, so the
// kernels' f32-then-16-bit double rounding must give this same correctly rounded result.
template <int kExpBits, int kMantBits>
struct SmallFloatRef {
  using Storage = uint16_t;
  static constexpr auto to_double = ref_to_double<kExpBits, kMantBits>;
  static constexpr auto from_double = ref_from_double<kExpBits, kMantBits>;
  static constexpr auto is_nan = ref_is_nan<kExpBits, kMantBits>;
  static std::vector<uint16_t> specials() {
    const int inf = 0x7fff & ~((1 << kMantBits) - 1);
    // zeros, 1, -2.5, +-inf, NaN, subnormals, largest finite
    const int values[] = {
        0x0000, 0x8000, from_double(1), from_double(-2.5), inf, 0x8000 | inf, inf | (1 << (kMantBits - 1)),
        0x0001, 0x8003, inf - 1};
    return std::vector<uint16_t>(std::begin(values), std::end(values));
  }
  static uint16_t random(std::mt19937_64& rng) {
    const uint64_t r = rng();
    if (r % 4 == 0) return static_cast<uint16_t>(r >> 8);  // any bit pattern
    // Otherwise exponents in a narrow band, so sums of neighbours round (and tie) often instead of being
    // dominated by the larger operand.
    const uint16_t exponent_field = static_cast<uint16_t>(((r >> 8) % 4 + 14) << kMantBits);
    const uint16_t mantissa = static_cast<uint16_t>((r >> 16) & ((1 << kMantBits) - 1));
    return static_cast<uint16_t>(((r >> 32) & 0x8000) | exponent_field | mantissa);
  }
  static uint16_t combine(ReduceOp op, uint16_t a, uint16_t b) {
    return from_double(ref_float_op(op, to_double(a), to_double(b)));
  }
  static bool same(uint16_t expected, uint16_t got) { return is_nan(expected) ? is_nan(got) : expected == got; }
  static std::string show(uint16_t v) { return std::to_string(v) + " (" + std::to_string(to_double(v)) + ")"; }
};
using HalfRef = SmallFloatRef<5, 10>;
using Bf16Ref = SmallFloatRef<8, 7>;

template <class F>
void with_ref(DataType dtype, F&& f) {
  // clang-format off
  switch (dtype) {
    case DataType::kInt8: return f(IntRef<int8_t>{});
    case DataType::kUint8: return f(IntRef<uint8_t>{});
    case DataType::kInt32: return f(IntRef<int32_t>{});
    case DataType::kUint32: return f(IntRef<uint32_t>{});
    case DataType::kInt64: return f(IntRef<int64_t>{});
    case DataType::kUint64: return f(IntRef<uint64_t>{});
    case DataType::kFloat16: return f(HalfRef{});
    case DataType::kFloat32: return f(FloatRef<float>{});
    case DataType::kFloat64: return f(FloatRef<double>{});
    case DataType::kBfloat16: return f(Bf16Ref{});
  }
  // clang-format on
  FAIL() << "unknown dtype";
}

const DataType kAllDtypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,   DataType::kUint32,
                               DataType::kInt64,   DataType::kUint64,  DataType::kFloat16, DataType::kFloat32,
                               DataType::kFloat64, DataType::kBfloat16};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};
const size_t kCounts[] = {0, 1, 7, 33, 1000 + 3, 4096 + 5};
constexpr size_t kGuard = 9;  // elements after the end that must stay untouched

std::string dtype_name(DataType d) {
  const char* names[] = {"i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16"};
  return names[static_cast<int>(d)];
}
std::string op_name(ReduceOp op) {
  const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return names[static_cast<int>(op)];
}

enum class Alias { kNone, kOutIsA, kOutIsB, kAll };

// Runs kernel on count elements starting offset elements into each buffer, with the given aliasing, and compares
// every element and the guard zone with the reference.
template <class Ref>
void check_kernel(Kernel kernel, ReduceOp op, size_t count, size_t offset, Alias alias, uint64_t seed,
                  size_t guard = kGuard) {
  using S = typename Ref::Storage;
  std::mt19937_64 rng(seed);
  const size_t total = offset + count + guard;
  std::vector<S> a(total), b(total), out(total);
  for (size_t i = 0; i < total; ++i) {
    a[i] = Ref::random(rng);
    b[i] = Ref::random(rng);
    out[i] = Ref::random(rng);
  }
  const std::vector<S> specials = Ref::specials();  // every pair of special values, at the start
  for (size_t i = 0; i < count && i < specials.size() * specials.size(); ++i) {
    a[offset + i] = specials[i % specials.size()];
    b[offset + i] = specials[i / specials.size()];
  }
  if (alias == Alias::kAll) b = a;
  std::vector<S> expected = alias == Alias::kOutIsB ? b : (alias == Alias::kNone ? out : a);
  for (size_t i = offset; i < offset + count; ++i) expected[i] = Ref::combine(op, a[i], b[i]);

  S* a_ptr = a.data() + offset;
  S* b_ptr = alias == Alias::kAll ? a_ptr : b.data() + offset;
  S* out_ptr = alias == Alias::kNone ? out.data() + offset : (alias == Alias::kOutIsB ? b_ptr : a_ptr);
  kernel(out_ptr, a_ptr, b_ptr, count);
  const std::vector<S>& got = alias == Alias::kNone ? out : (alias == Alias::kOutIsB ? b : a);

  int failures = 0;
  for (size_t i = 0; i < total && failures < 5; ++i) {
    if (!Ref::same(expected[i], got[i])) {
      ADD_FAILURE() << "element " << i << " (offset " << offset << ", count " << count << ", alias "
                    << static_cast<int>(alias) << "): expected " << Ref::show(expected[i]) << ", got "
                    << Ref::show(got[i]);
      ++failures;
    }
  }
}

using KernelParam = std::tuple<DataType, ReduceOp, Isa>;

class KernelTest : public ::testing::TestWithParam<KernelParam> {};

TEST_P(KernelTest, MatchesReference) {
  const DataType dtype = std::get<0>(GetParam());
  const ReduceOp op = std::get<1>(GetParam());  // not a structured binding: lambdas below capture it
  const Isa isa = std::get<2>(GetParam());
  const Kernel k = kernel_for_isa(dtype, op, isa);
  if (k == nullptr) GTEST_SKIP() << "this CPU cannot run " << isa_name(isa) << " code";
  uint64_t seed = 1;
  with_ref(dtype, [&](auto ref) {
    for (size_t count : kCounts) {
      for (size_t offset : {0, 1}) {
        for (Alias alias : {Alias::kNone, Alias::kOutIsA, Alias::kOutIsB, Alias::kAll}) {
          check_kernel<decltype(ref)>(k, op, count, offset, alias, seed++);
        }
      }
    }
    // Every tail length of the widest vectors, in buffers of exactly count elements (AddressSanitizer builds
    // then catch any read or write past the end).
    for (size_t count = 0; count <= 130; ++count) {
      check_kernel<decltype(ref)>(k, op, count, 0, Alias::kNone, seed++, 0);
      check_kernel<decltype(ref)>(k, op, count, 0, Alias::kOutIsA, seed++, 0);
    }
  });
}

TEST_P(KernelTest, AgreesBitwiseWithBaseline) {
  // Every instruction set must produce the same bits (ranks on different CPUs may reduce the same data), so compare
  // with the portable table on random bit patterns. Only NaN payloads may differ: when both inputs are NaN, which
  // one survives depends on operand order inside the compiled code.
  const DataType dtype = std::get<0>(GetParam());
  const ReduceOp op = std::get<1>(GetParam());
  const Kernel k = kernel_for_isa(dtype, op, std::get<2>(GetParam()));
  if (k == nullptr) GTEST_SKIP() << "this CPU cannot run " << isa_name(std::get<2>(GetParam())) << " code";
  with_ref(dtype, [&](auto ref) {
    using Ref = decltype(ref);
    const size_t count = 1021;
    std::vector<typename Ref::Storage> a(count), b(count), out(count), baseline(count);
    std::mt19937_64 rng(42);
    for (auto* values : {&a, &b}) {
      for (auto& value : *values) {
        const uint64_t bits = rng();
        std::memcpy(&value, &bits, sizeof(value));
      }
    }
    k(out.data(), a.data(), b.data(), count);
    kernel_for_isa(dtype, op, Isa::kBaseline)(baseline.data(), a.data(), b.data(), count);
    for (size_t i = 0; i < count; ++i) ASSERT_TRUE(Ref::same(baseline[i], out[i])) << i;
  });
}

INSTANTIATE_TEST_SUITE_P(AllDtypesOpsIsas, KernelTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDtypes), ::testing::ValuesIn(kAllOps),
                                            ::testing::Values(Isa::kBaseline, Isa::kAvx2, Isa::kAvx512, Isa::kNeon)),
                         [](const ::testing::TestParamInfo<KernelParam>& info) {
                           return dtype_name(std::get<0>(info.param)) + "_" + op_name(std::get<1>(info.param)) + "_" +
                                  isa_name(std::get<2>(info.param));
                         });

TEST(ReduceKernel, TableUsesBestIsaAndAvgIsSum) {
  for (DataType dtype : kAllDtypes) {
    for (ReduceOp op : kAllOps) {
      EXPECT_EQ(kernel(dtype, op), kernel_for_isa(dtype, op, best_isa())) << dtype_name(dtype) << op_name(op);
    }
    EXPECT_EQ(kernel(dtype, ReduceOp::kAvg), kernel(dtype, ReduceOp::kSum));
    EXPECT_NE(kernel(dtype, ReduceOp::kSum), kernel(dtype, ReduceOp::kProd));
  }
  EXPECT_NE(kernel_for_isa(DataType::kFloat32, ReduceOp::kSum, Isa::kBaseline), nullptr);
}

// Where NEON exists (every arm64 CPU) the table must be the NEON one: the portable path running there would pass
// every other test, only slower. Elsewhere no NEON table can be asked for.
TEST(ReduceKernel, Arm64RunsTheNeonKernels) {
#if defined(__aarch64__)
  EXPECT_EQ(best_isa(), Isa::kNeon) << isa_name(best_isa());
  for (DataType dtype : {DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32, DataType::kFloat64}) {
    for (ReduceOp op : kAllOps) {
      EXPECT_EQ(kernel(dtype, op), kernel_for_isa(dtype, op, Isa::kNeon)) << dtype_name(dtype) << op_name(op);
      EXPECT_NE(kernel(dtype, op), kernel_for_isa(dtype, op, Isa::kBaseline)) << dtype_name(dtype) << op_name(op);
    }
  }
#else
  EXPECT_NE(best_isa(), Isa::kNeon);
  EXPECT_EQ(kernel_for_isa(DataType::kFloat16, ReduceOp::kSum, Isa::kNeon), nullptr);
#endif
}

TEST(ReduceKernel, ApplyAndZeroCountWithNullPointers) {
  apply(nullptr, nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum);
  divide(nullptr, nullptr, 0, DataType::kInt32, 3);
  const int32_t a[3] = {1, -2, 2147483647}, b[3] = {10, 20, 1};
  int32_t out[3];
  apply(out, a, b, 3, DataType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(out[0], 11);
  EXPECT_EQ(out[1], 18);
  EXPECT_EQ(out[2], -2147483647 - 1);
}

TEST(ReduceKernel, HardwareF16ConversionsMatchScalarOnesBitwise) {
  // The AVX2/AVX-512 f16 kernels convert with F16C instructions, the NEON ones with fcvtl/fcvtn, half_to_float /
  // float_to_half with bit tricks.
  // With at most one NaN input the results must agree bit for bit (NaN payloads included) for every half, and for
  // products that need rounding (normal, subnormal, overflow).
  std::vector<uint16_t> all(65536), factors(65536), out(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (uint16_t factor : {0x8000, 0x3c01, 0xb555, 0x1801, 0x7bff}) {  // -0, 1+2^-10, -0.33, 2^-9, 65504
    std::fill(factors.begin(), factors.end(), factor);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd}) {
      for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
        const Kernel k = kernel_for_isa(DataType::kFloat16, op, isa);
        if (k == nullptr) continue;
        k(out.data(), all.data(), factors.data(), all.size());
        for (size_t i = 0; i < all.size(); ++i) {
          const float x = half_to_float(all[i]), y = half_to_float(factor);
          ASSERT_EQ(out[i], float_to_half(op == ReduceOp::kSum ? x + y : x * y)) << isa_name(isa) << " " << i;
        }
      }
    }
  }
}

TEST(ReduceKernel, MaxMinPropagateNanInEitherOrder) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float a[4] = {nan, 1, nan, -3}, b[4] = {1, nan, nan, 2};
  for (ReduceOp op : {ReduceOp::kMax, ReduceOp::kMin}) {
    float out[4];
    apply(out, a, b, 4, DataType::kFloat32, op);
    EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]) && std::isnan(out[2])) << op_name(op);
    EXPECT_EQ(out[3], op == ReduceOp::kMax ? 2.0f : -3.0f);
    for (DataType dtype : {DataType::kFloat16, DataType::kBfloat16}) {
      const bool half = dtype == DataType::kFloat16;
      const uint16_t nan16 = half ? 0x7e00 : 0x7fc0, one16 = half ? 0x3c00 : 0x3f80;
      const uint16_t ha[2] = {nan16, one16}, hb[2] = {one16, nan16};
      uint16_t hout[2];
      apply(hout, ha, hb, 2, dtype, op);
      const auto nan_check = half ? is_half_nan : is_bf16_nan;
      EXPECT_TRUE(nan_check(hout[0]) && nan_check(hout[1])) << dtype_name(dtype) << " " << op_name(op);
    }
  }
}

TEST(ReduceKernel, InvalidDtypeOrOpThrows) {
  const auto message_of = [](auto&& call) -> std::string {
    try {
      call();
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "(nothing thrown)";
  };
  EXPECT_NE(message_of([] { kernel(static_cast<DataType>(99), ReduceOp::kSum); }).find("99"), std::string::npos);
  EXPECT_NE(message_of([] { kernel(static_cast<DataType>(-1), ReduceOp::kSum); }).find("-1"), std::string::npos);
  EXPECT_NE(message_of([] { kernel(DataType::kFloat32, static_cast<ReduceOp>(5)); }).find("5"), std::string::npos);
  EXPECT_THROW(apply(nullptr, nullptr, nullptr, 0, DataType::kInt8, static_cast<ReduceOp>(42)), InvalidArgument);
  EXPECT_THROW(kernel_for_isa(static_cast<DataType>(10), ReduceOp::kSum, Isa::kBaseline), InvalidArgument);
  EXPECT_THROW(divide(nullptr, nullptr, 0, static_cast<DataType>(99), 2), InvalidArgument);
  EXPECT_THROW(divide(nullptr, nullptr, 0, DataType::kFloat32, 0), InvalidArgument);
  EXPECT_THROW(divide(nullptr, nullptr, 0, DataType::kUint32, -2), InvalidArgument);
}

// ---- divide ---------------------------------------------------------------------------------------------------

template <class T>
std::vector<T> divided(std::vector<T> values, DataType dtype, int divisor) {
  std::vector<T> out(values.size());
  divide(out.data(), values.data(), values.size(), dtype, divisor);
  std::vector<T> in_place = values;
  divide(in_place.data(), in_place.data(), in_place.size(), dtype, divisor);
  EXPECT_EQ(0, std::memcmp(out.data(), in_place.data(), out.size() * sizeof(T))) << "in-place divide differs";
  return out;
}

TEST(ReduceDivide, IntegersTruncateTowardZero) {
  EXPECT_EQ(divided<int8_t>({-7, 7, -128, 127, -1, 0, -6}, DataType::kInt8, 2),
            (std::vector<int8_t>{-3, 3, -64, 63, 0, 0, -3}));
  EXPECT_EQ(divided<int8_t>({-7, 7, -128}, DataType::kInt8, -2), (std::vector<int8_t>{3, -3, 64}));
  EXPECT_EQ(divided<int8_t>({-128, 5}, DataType::kInt8, -1), (std::vector<int8_t>{-128, -5}));  // wraps
  EXPECT_EQ(divided<int8_t>({-128, 127}, DataType::kInt8, 200), (std::vector<int8_t>{0, 0}));
  EXPECT_EQ(divided<uint8_t>({255, 7, 0}, DataType::kUint8, 3), (std::vector<uint8_t>{85, 2, 0}));
  const int32_t int32_min = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(divided<int32_t>({-9, 9, int32_min, 2147483647}, DataType::kInt32, 4),
            (std::vector<int32_t>{-2, 2, -536870912, 536870911}));
  EXPECT_EQ(divided<int32_t>({int32_min, 3}, DataType::kInt32, -1), (std::vector<int32_t>{int32_min, -3}));
  EXPECT_EQ(divided<uint32_t>({4294967295u, 10}, DataType::kUint32, 7), (std::vector<uint32_t>{613566756u, 1}));
  const int64_t int64_min = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(divided<int64_t>({-10, int64_min, 10}, DataType::kInt64, 3),
            (std::vector<int64_t>{-3, -3074457345618258602LL, 3}));
  EXPECT_EQ(divided<int64_t>({int64_min}, DataType::kInt64, -1), (std::vector<int64_t>{int64_min}));
  EXPECT_EQ(divided<uint64_t>({18446744073709551615ull, 5}, DataType::kUint64, 5),
            (std::vector<uint64_t>{3689348814741910323ull, 1}));
}

TEST(ReduceDivide, FloatsDivideInTheirPrecision) {
  const std::vector<float> f32 = {1.0f, -3.0f, 7.5f, 0.1f, -0.0f, std::numeric_limits<float>::infinity()};
  const std::vector<float> f32_out = divided(f32, DataType::kFloat32, 3);
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_EQ(bits_as<uint32_t>(f32_out[i]), bits_as<uint32_t>(f32[i] / 3.0f));
  const std::vector<double> f64 = {1.0, -3.0, 0.1, 1e300};
  const std::vector<double> f64_out = divided(f64, DataType::kFloat64, 7);
  for (size_t i = 0; i < f64.size(); ++i) EXPECT_EQ(f64_out[i], f64[i] / 7.0);
  EXPECT_TRUE(std::isnan(divided<float>({std::nanf("")}, DataType::kFloat32, 2)[0]));

  // f16/bf16 over every bit pattern and a few divisors, against the double reference rounded once.
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (int divisor : {1, 2, 3, 7, -5, 1000}) {
    const std::vector<uint16_t> half = divided(all, DataType::kFloat16, divisor);
    const std::vector<uint16_t> bf16 = divided(all, DataType::kBfloat16, divisor);
    for (size_t i = 0; i < all.size(); ++i) {
      ASSERT_TRUE(HalfRef::same(ref_double_to_half(ref_half_to_double(all[i]) / divisor), half[i]))
          << "f16 " << i << " / " << divisor << " gave " << half[i];
      ASSERT_TRUE(Bf16Ref::same(ref_double_to_bf16(ref_bf16_to_double(all[i]) / divisor), bf16[i]))
          << "bf16 " << i << " / " << divisor << " gave " << bf16[i];
    }
  }
}

// ---- conversions ------------------------------------------------------------------------------------------------

TEST(ReduceConversion, HalfToFloatExhaustive) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    const double expected = ref_half_to_double(static_cast<uint16_t>(h));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
      ASSERT_EQ(bits_as<uint32_t>(f) & 0x7fffffffu, 0x7fc00000u | ((h & 0x3ffu) << 13)) << "quiet, payload kept " << h;
      ASSERT_EQ(float_to_half(f), h | 0x200) << "NaN payload not kept, made quiet: " << h;
    } else {
      ASSERT_EQ(bits_as<uint32_t>(f), bits_as<uint32_t>(static_cast<float>(expected))) << h;  // -0 included
      ASSERT_EQ(float_to_half(f), h) << "round trip " << h;
    }
  }
}

TEST(ReduceConversion, Bf16ToFloatExhaustive) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = bf16_to_float(static_cast<uint16_t>(b));
    ASSERT_EQ(bits_as<uint32_t>(f), b << 16) << b;
    if (is_bf16_nan(static_cast<uint16_t>(b))) {
      ASSERT_EQ(float_to_bf16(f), b | 0x40) << "NaN stays NaN, made quiet: " << b;
    } else {
      ASSERT_EQ(float_to_bf16(f), b) << "round trip " << b;
      ASSERT_EQ(ref_bf16_to_double(static_cast<uint16_t>(b)), static_cast<double>(f)) << b;
    }
  }
}

// For each pair of neighbouring 16-bit values (lo, hi): the midpoint goes to the even one, one float ulp either
// side goes to the nearer one. The midpoints are exact floats (at most 12 significant bits).
template <uint16_t (*convert)(float), double (*to_double)(uint16_t)>
void check_midpoints(uint32_t last_finite) {
  for (uint32_t lo = 0; lo <= last_finite; ++lo) {
    const uint32_t hi = lo + 1;  // last_finite + 1 is +inf; its "value" for rounding is the next binade
    const double lo_value = to_double(static_cast<uint16_t>(lo));
    const double hi_value =
        hi == last_finite + 1u ? 2 * to_double(static_cast<uint16_t>(hi - 1)) - to_double(static_cast<uint16_t>(hi - 2))
                               : to_double(static_cast<uint16_t>(hi));
    const float mid = static_cast<float>((lo_value + hi_value) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo_value + hi_value) / 2) << lo;
    for (uint32_t sign : {0u, 0x8000u}) {
      const float s = sign ? -1.0f : 1.0f;
      ASSERT_EQ(convert(s * static_cast<float>(lo_value)), sign | lo) << lo;
      ASSERT_EQ(convert(s * mid), sign | ((lo & 1) ? hi : lo)) << "tie at " << lo;
      ASSERT_EQ(convert(s * std::nextafter(mid, 0.0f)), sign | lo) << lo;
      ASSERT_EQ(convert(s * std::nextafter(mid, std::numeric_limits<float>::infinity())), sign | hi) << lo;
    }
  }
}

TEST(ReduceConversion, FloatToHalfAndBf16RoundToNearestEvenEverywhere) {
  check_midpoints<float_to_half, ref_to_double<5, 10>>(0x7bff);
  check_midpoints<float_to_bf16, ref_to_double<8, 7>>(0x7f7f);
}

TEST(ReduceConversion, KnownHalfCases) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(1.0f + 0x1p-11f), 0x3c00);      // tie, even stays
  EXPECT_EQ(float_to_half(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie, odd rounds up
  EXPECT_EQ(float_to_half(2047.0f + 0.5f), 0x6800);       // 2047.5 -> 2048: mantissa carry into the exponent
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65519.996f), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // overflow by rounding
  EXPECT_EQ(float_to_half(-1e10f), 0xfc00);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_half(0x1p-14f), 0x0400);             // smallest normal
  EXPECT_EQ(float_to_half(0x1p-14f - 0x1p-25f), 0x0400);  // largest subnormal + half a step: tie -> even 0x400
  EXPECT_EQ(float_to_half(0x1p-24f), 0x0001);             // smallest subnormal
  EXPECT_EQ(float_to_half(0x1p-25f), 0x0000);             // tie between 0 and 2^-24 -> 0
  EXPECT_EQ(float_to_half(0x1.8p-25f), 0x0001);
  EXPECT_EQ(float_to_half(3 * 0x1p-25f), 0x0002);  // tie between 1 and 2 -> 2
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::denorm_min()), 0x8000);
  EXPECT_TRUE(is_half_nan(float_to_half(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_half_nan(float_to_half(bits_as<float>(0x7f800001u))));  // payload only in the low bits
  EXPECT_TRUE(is_half_nan(float_to_half(bits_as<float>(0xff800001u))));
}

TEST(ReduceConversion, KnownBf16Cases) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80);                     // tie, even stays
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);                 // tie, odd rounds up
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // overflow by rounding
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(float_to_bf16(bits_as<float>(0x00008000u)), 0x0000);  // subnormal tie -> even 0
  EXPECT_EQ(float_to_bf16(bits_as<float>(0x00008001u)), 0x0001);
  EXPECT_EQ(float_to_bf16(bits_as<float>(0x00018000u)), 0x0002);         // subnormal tie -> even 2
  EXPECT_EQ(float_to_bf16(bits_as<float>(0x807fffffu)), 0x8080);         // largest subnormal rounds up to -min normal
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(bits_as<float>(0x7f800001u))));  // would round to inf if not handled
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(bits_as<float>(0x7fffffffu))));  // would carry into the sign
}

TEST(ReduceConversion, SampledFloatsMatchReference) {
  // A stride through all 2^32 float bit patterns (every exponent, both signs, NaNs) against the references.
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 4099) {
    const float f = bits_as<float>(static_cast<uint32_t>(bits));
    ASSERT_TRUE(HalfRef::same(ref_double_to_half(f), float_to_half(f))) << std::hex << bits;
    ASSERT_TRUE(Bf16Ref::same(ref_double_to_bf16(f), float_to_bf16(f))) << std::hex << bits;
  }
}

}  // namespace
}  // namespace tbcoll::reduce
