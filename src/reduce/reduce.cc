// Reduction kernels: kTables[isa][dtype][op], 4 x 10 x 4 plain functions (kAvg uses kSum's), each one
// instantiation of a loop template for (storage type, op), compiled once per instruction set:
//
//   binary_loop   out[i] = Type::store(Op(Type::load(a[i]), Type::load(b[i])))   ints, f32, f64 (f16 baseline)
//   bf16_loop     the same on 32-bit words holding two bf16 each (no shuffles)   bf16
//   half_loop_*   F16C / AVX-512 conversions around the same Op                   f16 on AVX2 / AVX-512
//   *_loop_neon   NEON: fcvtl/fcvtn around the Op (f16), shifts (bf16), f32/f64  arm64 (ints: binary_loop, which
//                 lanes; NaN-propagating max/min as compare + bit select          the vectorizer turns into NEON)
//
// The portable loops are written for the auto-vectorizer: no calls, no branches (ternaries become blends), f16/bf16
// conversions as integer bit tricks. The project builds at -O2, where GCC 12 only vectorizes loops whose trip
// count is known, so the kernels ask for the dynamic cost model themselves (TBCOLL_VECTORIZE).
#include "reduce/reduce.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#if defined(__x86_64__) || defined(__i386__)
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 reports its own _mm512_undefined_ps() (`__m512 __Y = __Y;`) as maybe-uninitialized once AVX-512
// intrinsics are inlined (GCC bug 105593, fixed in 12.3/13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
#include <cpuid.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace tbcoll::reduce {
namespace {

#if defined(__x86_64__) || defined(__i386__)
#define TBCOLL_REDUCE_X86 1
#define TBCOLL_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#define TBCOLL_TARGET_AVX2 __attribute__((target("avx2,f16c")))
#else
#define TBCOLL_REDUCE_X86 0
#endif
#if defined(__aarch64__)
#define TBCOLL_REDUCE_NEON 1  // Advanced SIMD, f16 conversions included, is part of every ARMv8-A CPU
#else
#define TBCOLL_REDUCE_NEON 0
#endif

#if defined(__clang__)
#define TBCOLL_VECTORIZE __attribute__((flatten))
// Exact aliasing (out == a) carries no dependence between iterations, so vectorizing is safe; without this the
// compiler versions the loop on an overlap check and runs the in-place case (the common one) scalar.
#define TBCOLL_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define TBCOLL_VECTORIZE __attribute__((flatten, optimize("tree-vectorize", "vect-cost-model=dynamic")))
#define TBCOLL_IVDEP _Pragma("GCC ivdep")
#else
#define TBCOLL_VECTORIZE
#define TBCOLL_IVDEP
#endif
#define TBCOLL_INLINE inline __attribute__((always_inline))

template <class To, class From>
TBCOLL_INLINE To bits_as(From from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof(to));
  return to;
}

// ---- f16 / bf16 <-> f32, branch-free so the loops that call them vectorize ----------------------------------

TBCOLL_INLINE float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t magnitude = h & 0x7fffu;
  const uint32_t normal = (magnitude << 13) + (112u << 23);  // exponent bias 15 -> 127
  // A subnormal half is m * 2^-24 with m < 2^10: int -> float is exact and normalizes m, then subtracting 24
  // from the exponent scales it. Integer-only on purpose: GCC will not turn a branch around an FP multiply (which
  // may trap) into a blend, and the loop would stay scalar.
  const uint32_t subnormal =
      bits_as<uint32_t>(static_cast<float>(static_cast<int32_t>(magnitude))) - (magnitude != 0 ? 24u << 23 : 0u);
  // Inf keeps a zero mantissa; NaN gets the quiet bit, as F16C's vcvtph2ps does.
  const uint32_t special = (magnitude << 13) | 0x7f800000u | (magnitude > 0x7c00u ? 0x00400000u : 0u);
  const uint32_t magnitude_bits = magnitude >= 0x7c00u ? special : (magnitude < 0x400u ? subnormal : normal);
  return bits_as<float>(sign | magnitude_bits);
}

TBCOLL_INLINE uint16_t float_to_half_bits(float f) {
  const uint32_t x = bits_as<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7fffffffu;
  // Normal range: rebias, then round the 13 dropped bits to nearest even (adding 0xfff + lowest kept bit carries
  // exactly when the dropped part is above half, or exactly half with an odd kept part). A carry out of the
  // mantissa correctly bumps the exponent.
  const uint32_t normal = (magnitude - (112u << 23) + 0xfffu + ((magnitude >> 13) & 1u)) >> 13;
  // Subnormal range (below 2^-14): the half is the float's 24-bit significand shifted right by 126 - exponent,
  // rounded to nearest even the same way. Shifts past 25 all give 0, and this value is computed (then discarded)
  // for normal inputs too, so the shift is clamped to [14, 25] to stay defined. Float subnormals (exponent 0) get
  // a wrong implicit bit but still shift out to 0.
  const int32_t unclamped_shift = 126 - static_cast<int32_t>(magnitude >> 23);
  const uint32_t shift = static_cast<uint32_t>(std::min(std::max(unclamped_shift, 14), 25));  // min/max, no branch
  const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  const uint32_t subnormal = (significand + (1u << (shift - 1)) - 1u + ((significand >> shift) & 1u)) >> shift;
  const uint32_t nan = 0x7e00u | ((magnitude >> 13) & 0x3ffu);  // quiet, top payload bits kept (like vcvtps2ph)
  // 0x477ff000 = 65520, halfway between the largest half (65504, odd mantissa) and 65536: ties to even -> inf.
  const uint32_t magnitude_bits = magnitude > 0x7f800000u    ? nan
                                  : magnitude >= 0x477ff000u ? 0x7c00u
                                  : magnitude >= 0x38800000u ? normal
                                                             : subnormal;
  return static_cast<uint16_t>(sign | magnitude_bits);
}

TBCOLL_INLINE float bf16_bits_to_float(uint16_t b) { return bits_as<float>(static_cast<uint32_t>(b) << 16); }

// The bf16 bits in the low 16 bits of the result (the high 16 are zero).
TBCOLL_INLINE uint32_t float_to_bf16_word(float f) {
  const uint32_t x = bits_as<uint32_t>(f);
  // Round to nearest even on the low 16 bits; overflow carries into the exponent and yields inf. A NaN could
  // round to inf, so it is quieted instead.
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  const uint32_t nan = (x >> 16) | 0x40u;
  return (x & 0x7fffffffu) > 0x7f800000u ? nan : rounded;
}

TBCOLL_INLINE uint16_t float_to_bf16_bits(float f) { return static_cast<uint16_t>(float_to_bf16_word(f)); }

// ---- element types: how a value is stored and in which type it is combined ---------------------------------

template <class T>
struct Plain {
  using Storage = T;
  using Compute = T;
  static TBCOLL_INLINE T load(T v) { return v; }
  static TBCOLL_INLINE T store(T v) { return v; }
};
struct Half {
  using Storage = uint16_t;
  using Compute = float;
  static TBCOLL_INLINE float load(uint16_t v) { return half_bits_to_float(v); }
  static TBCOLL_INLINE uint16_t store(float v) { return float_to_half_bits(v); }
};
struct Bf16 {
  using Storage = uint16_t;
  using Compute = float;
  static TBCOLL_INLINE float load(uint16_t v) { return bf16_bits_to_float(v); }
  static TBCOLL_INLINE uint16_t store(float v) { return float_to_bf16_bits(v); }
};

// Integer sum/prod go through an unsigned type so overflow wraps instead of being UB. Types narrower than int are
// widened to unsigned int first: uint8 * uint8 would otherwise promote to (signed) int.
template <class T>
using WrapType = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <class T>
TBCOLL_INLINE bool is_nan(T v) {
  return std::is_floating_point_v<T> && v != v;
}

struct Sum {
  template <class T>
  static TBCOLL_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrapType<T>>(a) + static_cast<WrapType<T>>(b));
    } else {
      return a + b;
    }
  }
};
struct Prod {
  template <class T>
  static TBCOLL_INLINE T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<WrapType<T>>(a) * static_cast<WrapType<T>>(b));
    } else {
      return a * b;
    }
  }
};
// A bare (a > b ? a : b) returns b whenever either side is NaN, so a NaN would survive or vanish depending on the
// order in which an algorithm combines ranks. Checking a for NaN makes any NaN win, in every order.
struct Max {
  template <class T>
  static TBCOLL_INLINE T apply(T a, T b) {
    return (a > b || is_nan(a)) ? a : b;
  }
};
struct Min {
  template <class T>
  static TBCOLL_INLINE T apply(T a, T b) {
    return (a < b || is_nan(a)) ? a : b;
  }
};

// ---- the loops ----------------------------------------------------------------------------------------------

template <class Type, class Op>
TBCOLL_INLINE void binary_loop(void* out, const void* a, const void* b, size_t count) {
  using S = typename Type::Storage;
  S* o = static_cast<S*>(out);
  const S* x = static_cast<const S*>(a);
  const S* y = static_cast<const S*>(b);
  TBCOLL_IVDEP
  for (size_t i = 0; i < count; ++i) o[i] = Type::store(Op::apply(Type::load(x[i]), Type::load(y[i])));
}

// bf16 two at a time, as 32-bit words: the high element is a float once the low half is masked off, the low one
// once shifted up, and the results go back with a shift and an or. No widening or narrowing shuffles, so the loop
// vectorizes at full width with plain 32-bit integer and float ops on every instruction set (the element-wise
// version spends most of its time in pmovzxwd / vpmovdw).
template <class Op>
TBCOLL_INLINE void bf16_loop(void* out, const void* a, const void* b, size_t count) {
  auto* o = static_cast<unsigned char*>(out);
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  const size_t pairs = count / 2;
  TBCOLL_IVDEP
  for (size_t i = 0; i < pairs; ++i) {
    uint32_t x_word, y_word;
    std::memcpy(&x_word, x + 4 * i, 4);
    std::memcpy(&y_word, y + 4 * i, 4);
    const float low = Op::apply(bits_as<float>(x_word << 16), bits_as<float>(y_word << 16));
    const float high = Op::apply(bits_as<float>(x_word & 0xffff0000u), bits_as<float>(y_word & 0xffff0000u));
    const uint32_t word = float_to_bf16_word(low) | (float_to_bf16_word(high) << 16);
    std::memcpy(o + 4 * i, &word, 4);
  }
  if (count % 2 != 0) binary_loop<Bf16, Op>(o + 4 * pairs, x + 4 * pairs, y + 4 * pairs, 1);
}

template <class Type, class Op>
TBCOLL_INLINE void portable_loop(void* out, const void* a, const void* b, size_t count) {
  if constexpr (std::is_same_v<Type, Bf16>) {
    bf16_loop<Op>(out, a, b, count);
  } else {
    binary_loop<Type, Op>(out, a, b, count);
  }
}

template <class Type>
TBCOLL_INLINE void divide_loop(void* out, const void* in, size_t count, int divisor) {
  using S = typename Type::Storage;
  using C = typename Type::Compute;
  S* o = static_cast<S*>(out);
  const S* x = static_cast<const S*>(in);
  if constexpr (std::is_integral_v<C>) {
    if constexpr (std::is_signed_v<C>) {
      if (divisor == -1) {  // INT_MIN / -1 overflows (and traps on x86): negate with wrap-around instead
        TBCOLL_IVDEP
        for (size_t i = 0; i < count; ++i) o[i] = static_cast<S>(WrapType<S>(0) - static_cast<WrapType<S>>(x[i]));
        return;
      }
    }
    // Divide in a 64-bit type of the same signedness: the divisor fits whatever S is, the quotient fits back in S.
    using Wide = std::conditional_t<std::is_signed_v<C>, int64_t, uint64_t>;
    const Wide d = static_cast<Wide>(divisor);
    TBCOLL_IVDEP
    for (size_t i = 0; i < count; ++i) o[i] = static_cast<S>(static_cast<Wide>(x[i]) / d);
  } else {
    const C d = static_cast<C>(divisor);  // exact for |divisor| <= 2^24, far above any world size
    TBCOLL_IVDEP
    for (size_t i = 0; i < count; ++i) o[i] = Type::store(Type::load(x[i]) / d);
  }
}

#if TBCOLL_REDUCE_X86
// f16 with the hardware conversions (vcvtph2ps / vcvtps2ph): over 10x the auto-vectorized bit tricks, and the same
// bits as half_bits_to_float / float_to_half_bits, NaN payloads included (a test checks every half), so the scalar
// tails and CPUs without them agree. _mm*_max_ps(a, b) is exactly (a > b ? a : b) and min_ps (a < b ? a : b);
// putting a back where it is NaN gives Max/Min's NaN propagation.
template <class Op>
TBCOLL_TARGET_AVX512 TBCOLL_INLINE __m512 apply_avx512(__m512 a, __m512 b) {
  if constexpr (std::is_same_v<Op, Sum>) return _mm512_add_ps(a, b);
  if constexpr (std::is_same_v<Op, Prod>) return _mm512_mul_ps(a, b);
  const __mmask16 a_is_nan = _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
  if constexpr (std::is_same_v<Op, Max>) return _mm512_mask_mov_ps(_mm512_max_ps(a, b), a_is_nan, a);
  if constexpr (std::is_same_v<Op, Min>) return _mm512_mask_mov_ps(_mm512_min_ps(a, b), a_is_nan, a);
}

template <class Op>
TBCOLL_TARGET_AVX2 TBCOLL_INLINE __m256 apply_avx2(__m256 a, __m256 b) {
  if constexpr (std::is_same_v<Op, Sum>) return _mm256_add_ps(a, b);
  if constexpr (std::is_same_v<Op, Prod>) return _mm256_mul_ps(a, b);
  const __m256 a_is_nan = _mm256_cmp_ps(a, a, _CMP_UNORD_Q);
  if constexpr (std::is_same_v<Op, Max>) return _mm256_blendv_ps(_mm256_max_ps(a, b), a, a_is_nan);
  if constexpr (std::is_same_v<Op, Min>) return _mm256_blendv_ps(_mm256_min_ps(a, b), a, a_is_nan);
}

constexpr int kRoundNearestEven = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// Each iteration loads both inputs before it stores, so exact aliasing is fine.
template <class Op>
TBCOLL_TARGET_AVX512 TBCOLL_INLINE void half_loop_avx512(void* out, const void* a, const void* b, size_t count) {
  auto* o = static_cast<uint16_t*>(out);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 xf = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
    const __m512 yf = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i),
                        _mm512_cvtps_ph(apply_avx512<Op>(xf, yf), kRoundNearestEven));
  }
  for (; i < count; ++i) o[i] = Half::store(Op::apply(Half::load(x[i]), Half::load(y[i])));
}

template <class Op>
TBCOLL_TARGET_AVX2 TBCOLL_INLINE void half_loop_avx2(void* out, const void* a, const void* b, size_t count) {
  auto* o = static_cast<uint16_t*>(out);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 xf = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    const __m256 yf = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i), _mm256_cvtps_ph(apply_avx2<Op>(xf, yf), kRoundNearestEven));
  }
  for (; i < count; ++i) o[i] = Half::store(Op::apply(Half::load(x[i]), Half::load(y[i])));
}
#endif  // TBCOLL_REDUCE_X86

#if TBCOLL_REDUCE_NEON
// NEON lanes with the scalar Op's exact semantics: max/min pick a where (a > b) / (a < b) and keep a where it is NaN
// (fmax/fmin differ on NaN and on signed zeros). fcvtl/fcvtn give the bits of half_bits_to_float /
// float_to_half_bits (round to nearest even, quiet NaNs with the top payload bits), bf16 rounds as
// float_to_bf16_word. No FMA: each op is one rounding, as in the portable loops.
template <class Op>
TBCOLL_INLINE float32x4_t apply_neon(float32x4_t a, float32x4_t b) {
  if constexpr (std::is_same_v<Op, Sum>) {
    return vaddq_f32(a, b);
  } else if constexpr (std::is_same_v<Op, Prod>) {
    return vmulq_f32(a, b);
  } else {
    const uint32x4_t pick_a = std::is_same_v<Op, Max> ? vcgtq_f32(a, b) : vcltq_f32(a, b);
    return vbslq_f32(vceqq_f32(a, a), vbslq_f32(pick_a, a, b), a);
  }
}

template <class Op>
TBCOLL_INLINE float64x2_t apply_neon(float64x2_t a, float64x2_t b) {
  if constexpr (std::is_same_v<Op, Sum>) {
    return vaddq_f64(a, b);
  } else if constexpr (std::is_same_v<Op, Prod>) {
    return vmulq_f64(a, b);
  } else {
    const uint64x2_t pick_a = std::is_same_v<Op, Max> ? vcgtq_f64(a, b) : vcltq_f64(a, b);
    return vbslq_f64(vceqq_f64(a, a), vbslq_f64(pick_a, a, b), a);
  }
}

template <class Op>
TBCOLL_INLINE void float_loop_neon(void* out, const void* a, const void* b, size_t count) {
  auto* o = static_cast<float*>(out);
  const auto* x = static_cast<const float*>(a);
  const auto* y = static_cast<const float*>(b);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {  // both inputs loaded before the stores: exact aliasing is fine
    const float32x4_t low = apply_neon<Op>(vld1q_f32(x + i), vld1q_f32(y + i));
    const float32x4_t high = apply_neon<Op>(vld1q_f32(x + i + 4), vld1q_f32(y + i + 4));
    vst1q_f32(o + i, low);
    vst1q_f32(o + i + 4, high);
  }
  for (; i < count; ++i) o[i] = Op::apply(x[i], y[i]);
}

template <class Op>
TBCOLL_INLINE void double_loop_neon(void* out, const void* a, const void* b, size_t count) {
  auto* o = static_cast<double*>(out);
  const auto* x = static_cast<const double*>(a);
  const auto* y = static_cast<const double*>(b);
  size_t i = 0;
  for (; i + 4 <= count; i += 4) {
    const float64x2_t low = apply_neon<Op>(vld1q_f64(x + i), vld1q_f64(y + i));
    const float64x2_t high = apply_neon<Op>(vld1q_f64(x + i + 2), vld1q_f64(y + i + 2));
    vst1q_f64(o + i, low);
    vst1q_f64(o + i + 2, high);
  }
  for (; i < count; ++i) o[i] = Op::apply(x[i], y[i]);
}

template <class Op>
TBCOLL_INLINE void half_loop_neon(void* out, const void* a, const void* b, size_t count) {
  auto* o = static_cast<uint16_t*>(out);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const float16x8_t xh = vreinterpretq_f16_u16(vld1q_u16(x + i));
    const float16x8_t yh = vreinterpretq_f16_u16(vld1q_u16(y + i));
    const float32x4_t low = apply_neon<Op>(vcvt_f32_f16(vget_low_f16(xh)), vcvt_f32_f16(vget_low_f16(yh)));
    const float32x4_t high = apply_neon<Op>(vcvt_high_f32_f16(xh), vcvt_high_f32_f16(yh));
    vst1q_u16(o + i, vreinterpretq_u16_f16(vcvt_high_f16_f32(vcvt_f16_f32(low), high)));
  }
  for (; i < count; ++i) o[i] = Half::store(Op::apply(Half::load(x[i]), Half::load(y[i])));
}

// float_to_bf16_word on four lanes: the bf16 bits in the low half of each.
TBCOLL_INLINE uint32x4_t float_to_bf16_neon(float32x4_t f) {
  const uint32x4_t x = vreinterpretq_u32_f32(f);
  const uint32x4_t odd = vandq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(1));
  const uint32x4_t rounded = vshrq_n_u32(vaddq_u32(vaddq_u32(x, vdupq_n_u32(0x7fffu)), odd), 16);
  const uint32x4_t nan = vorrq_u32(vshrq_n_u32(x, 16), vdupq_n_u32(0x40u));
  const uint32x4_t is_nan = vcgtq_u32(vandq_u32(x, vdupq_n_u32(0x7fffffffu)), vdupq_n_u32(0x7f800000u));
  return vbslq_u32(is_nan, nan, rounded);
}

template <class Op>
TBCOLL_INLINE void bf16_loop_neon(void* out, const void* a, const void* b, size_t count) {
  auto* o = static_cast<uint16_t*>(out);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {  // widening is a shift by 16: bf16 is the top half of an f32
    const uint16x8_t xv = vld1q_u16(x + i);
    const uint16x8_t yv = vld1q_u16(y + i);
    const float32x4_t low = apply_neon<Op>(vreinterpretq_f32_u32(vshlq_n_u32(vmovl_u16(vget_low_u16(xv)), 16)),
                                           vreinterpretq_f32_u32(vshlq_n_u32(vmovl_u16(vget_low_u16(yv)), 16)));
    const float32x4_t high = apply_neon<Op>(vreinterpretq_f32_u32(vshlq_n_u32(vmovl_high_u16(xv), 16)),
                                            vreinterpretq_f32_u32(vshlq_n_u32(vmovl_high_u16(yv), 16)));
    vst1q_u16(o + i, vcombine_u16(vmovn_u32(float_to_bf16_neon(low)), vmovn_u32(float_to_bf16_neon(high))));
  }
  for (; i < count; ++i) o[i] = Bf16::store(Op::apply(Bf16::load(x[i]), Bf16::load(y[i])));
}
#endif  // TBCOLL_REDUCE_NEON

using DivideKernel = void (*)(void* out, const void* in, size_t count, int divisor);

// One instantiation per instruction set. Only these carry target attributes; the always-inline loop bodies are
// compiled anew inside each.
template <Isa isa, class Type, class Op>
struct Variant;

template <class Type, class Op>
struct Variant<Isa::kBaseline, Type, Op> {
  static TBCOLL_VECTORIZE void binary(void* out, const void* a, const void* b, size_t count) {
    portable_loop<Type, Op>(out, a, b, count);
  }
  static TBCOLL_VECTORIZE void divide(void* out, const void* in, size_t count, int divisor) {
    divide_loop<Type>(out, in, count, divisor);
  }
};

#if TBCOLL_REDUCE_X86
template <class Type, class Op>
struct Variant<Isa::kAvx2, Type, Op> {
  static TBCOLL_TARGET_AVX2 TBCOLL_VECTORIZE void binary(void* out, const void* a, const void* b, size_t count) {
    if constexpr (std::is_same_v<Type, Half>) {
      half_loop_avx2<Op>(out, a, b, count);
    } else {
      portable_loop<Type, Op>(out, a, b, count);
    }
  }
  static TBCOLL_TARGET_AVX2 TBCOLL_VECTORIZE void divide(void* out, const void* in, size_t count, int divisor) {
    divide_loop<Type>(out, in, count, divisor);
  }
};
template <class Type, class Op>
struct Variant<Isa::kAvx512, Type, Op> {
  static TBCOLL_TARGET_AVX512 TBCOLL_VECTORIZE void binary(void* out, const void* a, const void* b, size_t count) {
    if constexpr (std::is_same_v<Type, Half>) {
      half_loop_avx512<Op>(out, a, b, count);
    } else {
      portable_loop<Type, Op>(out, a, b, count);
    }
  }
  static TBCOLL_TARGET_AVX512 TBCOLL_VECTORIZE void divide(void* out, const void* in, size_t count, int divisor) {
    divide_loop<Type>(out, in, count, divisor);
  }
};
#else  // other architectures: these tables cannot run (cpu_supports) and repeat the baseline
template <class Type, class Op>
struct Variant<Isa::kAvx2, Type, Op> : Variant<Isa::kBaseline, Type, Op> {};
template <class Type, class Op>
struct Variant<Isa::kAvx512, Type, Op> : Variant<Isa::kBaseline, Type, Op> {};
#endif

#if TBCOLL_REDUCE_NEON
template <class Type, class Op>
struct Variant<Isa::kNeon, Type, Op> {
  static TBCOLL_VECTORIZE void binary(void* out, const void* a, const void* b, size_t count) {
    if constexpr (std::is_same_v<Type, Half>) {
      half_loop_neon<Op>(out, a, b, count);
    } else if constexpr (std::is_same_v<Type, Bf16>) {
      bf16_loop_neon<Op>(out, a, b, count);
    } else if constexpr (std::is_same_v<Type, Plain<float>>) {
      float_loop_neon<Op>(out, a, b, count);
    } else if constexpr (std::is_same_v<Type, Plain<double>>) {
      double_loop_neon<Op>(out, a, b, count);
    } else {
      binary_loop<Type, Op>(out, a, b, count);
    }
  }
  static TBCOLL_VECTORIZE void divide(void* out, const void* in, size_t count, int divisor) {
    divide_loop<Type>(out, in, count, divisor);
  }
};
#else
template <class Type, class Op>
struct Variant<Isa::kNeon, Type, Op> : Variant<Isa::kBaseline, Type, Op> {};
#endif

// ---- the tables ---------------------------------------------------------------------------------------------

constexpr int kNumKernelOps = 4;  // sum, prod, max, min; kAvg shares kSum
static_assert(static_cast<int>(ReduceOp::kSum) == 0 && static_cast<int>(ReduceOp::kProd) == 1 &&
              static_cast<int>(ReduceOp::kMax) == 2 && static_cast<int>(ReduceOp::kMin) == 3 &&
              static_cast<int>(ReduceOp::kAvg) == 4 && kNumReduceOps == 5);

struct Row {
  std::array<Kernel, kNumKernelOps> binary;
  DivideKernel divide;
};
using Table = std::array<Row, kNumDataTypes>;
constexpr int kNumIsas = 4;

template <Isa isa, class Type>
constexpr Row make_row() {
  return Row{{&Variant<isa, Type, Sum>::binary, &Variant<isa, Type, Prod>::binary, &Variant<isa, Type, Max>::binary,
              &Variant<isa, Type, Min>::binary},
             &Variant<isa, Type, Sum>::divide};
}

// Rows in DataType order (checked below).
template <Isa isa>
constexpr Table make_table() {
  return Table{make_row<isa, Plain<int8_t>>(),  make_row<isa, Plain<uint8_t>>(),
               make_row<isa, Plain<int32_t>>(), make_row<isa, Plain<uint32_t>>(),
               make_row<isa, Plain<int64_t>>(), make_row<isa, Plain<uint64_t>>(),
               make_row<isa, Half>(),           make_row<isa, Plain<float>>(),
               make_row<isa, Plain<double>>(),  make_row<isa, Bf16>()};
}
static_assert(static_cast<int>(DataType::kInt8) == 0 && static_cast<int>(DataType::kUint8) == 1 &&
              static_cast<int>(DataType::kInt32) == 2 && static_cast<int>(DataType::kUint32) == 3 &&
              static_cast<int>(DataType::kInt64) == 4 && static_cast<int>(DataType::kUint64) == 5 &&
              static_cast<int>(DataType::kFloat16) == 6 && static_cast<int>(DataType::kFloat32) == 7 &&
              static_cast<int>(DataType::kFloat64) == 8 && static_cast<int>(DataType::kBfloat16) == 9 &&
              kNumDataTypes == 10);

constexpr std::array<Table, kNumIsas> kTables = {make_table<Isa::kBaseline>(), make_table<Isa::kAvx2>(),
                                                 make_table<Isa::kAvx512>(), make_table<Isa::kNeon>()};

#if TBCOLL_REDUCE_X86
bool cpu_has_f16c() {  // read CPUID directly: Clang's __builtin_cpu_supports does not know "f16c"
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

bool cpu_supports(Isa isa) {
#if TBCOLL_REDUCE_X86
  // __builtin_cpu_supports also checks that the OS saves the wide registers (XGETBV), not only CPUID.
  switch (isa) {
    case Isa::kBaseline:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && cpu_has_f16c();
    case Isa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    case Isa::kNeon:
      return false;
  }
  return false;
#elif TBCOLL_REDUCE_NEON
  return isa == Isa::kBaseline || isa == Isa::kNeon;  // every arm64 CPU (Linux and macOS) has Advanced SIMD
#else
  return isa == Isa::kBaseline;
#endif
}

const Table& active_table() {
  static const Table& table = kTables[static_cast<int>(best_isa())];
  return table;
}

int checked_dtype(DataType dtype) {
  const int index = static_cast<int>(dtype);
  if (index < 0 || index >= kNumDataTypes) {
    throw InvalidArgument("[reduce] unknown dtype " + std::to_string(index));
  }
  return index;
}

int checked_op(ReduceOp op) {
  const int index = static_cast<int>(op);
  if (index < 0 || index >= kNumReduceOps) throw InvalidArgument("[reduce] unknown op " + std::to_string(index));
  return op == ReduceOp::kAvg ? static_cast<int>(ReduceOp::kSum) : index;
}

}  // namespace

Isa best_isa() {
  static const Isa best = [] {
    for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kNeon}) {
      if (cpu_supports(isa)) return isa;
    }
    return Isa::kBaseline;
  }();
  return best;
}

const char* isa_name(Isa isa) {
  static const char* const kNames[kNumIsas] = {"baseline", "avx2", "avx512", "neon"};
  const int index = static_cast<int>(isa);
  return index >= 0 && index < kNumIsas ? kNames[index] : "invalid";
}

Kernel kernel(DataType dtype, ReduceOp op) {
  const int dtype_index = checked_dtype(dtype);
  return active_table()[dtype_index].binary[checked_op(op)];
}

Kernel kernel_for_isa(DataType dtype, ReduceOp op, Isa isa) {
  const int dtype_index = checked_dtype(dtype);
  const int op_index = checked_op(op);
  const int isa_index = static_cast<int>(isa);
  if (isa_index < 0 || isa_index >= kNumIsas)
    throw InvalidArgument("[reduce] unknown isa " + std::to_string(isa_index));
  if (!cpu_supports(isa)) return nullptr;
  return kTables[isa_index][dtype_index].binary[op_index];
}

void divide(void* out, const void* in, size_t count, DataType dtype, int divisor) {
  const int dtype_index = checked_dtype(dtype);
  if (divisor == 0) throw InvalidArgument("[reduce] divide by zero");
  if (divisor < 0 && is_unsigned(dtype)) {
    throw InvalidArgument("[reduce] negative divisor " + std::to_string(divisor) + " for an unsigned dtype");
  }
  active_table()[dtype_index].divide(out, in, count, divisor);
}

float half_to_float(uint16_t h) { return half_bits_to_float(h); }
uint16_t float_to_half(float f) { return float_to_half_bits(f); }
float bf16_to_float(uint16_t b) { return bf16_bits_to_float(b); }
uint16_t float_to_bf16(float f) { return float_to_bf16_bits(f); }

}  // namespace tbcoll::reduce
