// The numeric kernels (see kernels.h): the matrix products, RMS norm and softmax, and softmax's vector exp.
#include "kernels.h"

#include <cmath>
#include <cstddef>

#if defined(TP_HAVE_LIBMVEC)
#include <immintrin.h>
#endif

namespace tp_inference {
namespace {

// Matrix-vector product, four rows at a time, each row with 8 partial sums: the fixed-width inner loops become
// vector multiply-adds at -O2 on any SIMD width (no intrinsics, no -ffast-math), and four rows in flight hide the
// add latency. Every row is summed in the same order whatever the rows around it, so results never depend on how
// a matrix was sharded.
inline float finish_row(const float* acc, const float* __restrict w, const float* __restrict x, int j, int n) {
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; j < n; ++j) sum += w[j] * x[j];
  return sum;
}

// out[t][rows] = W[rows x cols] · x[t] for n_tokens rows of x. Four weight rows at a time, each against every
// token before the next four: the block (4 x cols floats) stays in L1 while the tokens stream past, so a batched
// prefill reads each weight once per batch instead of once per token. Token pairs share the weight loads. With
// n_tokens = 1 it is the plain matrix-vector product; either way each (row, token) sum is the same sequence of
// operations, so batching never changes a result bit.
template <int kRows, int kTokens>
inline void dot_block(float* __restrict out, size_t out_stride, const float* __restrict w, size_t w_stride,
                      const float* __restrict x, size_t x_stride, int body, int cols) {
  float acc[kTokens][kRows][8] = {};
  for (int j = 0; j < body; j += 8) {
    for (int t = 0; t < kTokens; ++t) {
      const float* xt = x + static_cast<size_t>(t) * x_stride + j;
      for (int r = 0; r < kRows; ++r) {
        const float* wr = w + static_cast<size_t>(r) * w_stride + j;
        for (int k = 0; k < 8; ++k) acc[t][r][k] += wr[k] * xt[k];
      }
    }
  }
  for (int t = 0; t < kTokens; ++t) {
    for (int r = 0; r < kRows; ++r) {
      out[static_cast<size_t>(t) * out_stride + static_cast<size_t>(r)] = finish_row(
          acc[t][r], w + static_cast<size_t>(r) * w_stride, x + static_cast<size_t>(t) * x_stride, body, cols);
    }
  }
}

// x[i] = exp(x[i] - max_val), with results below the smallest normal float (inputs under kExpCutoff) flushed to
// 0, as the -Ofast reference's flush-to-zero mode does. Those inputs are why: glibc's vector expf sends every
// lane beyond +-87.3 to a scalar fallback with libm's underflow path (errno), and a few heads with sharp
// attention have them at many positions; that made the ranks that hold those heads up to 0.5 us slower per
// layer, a wait the other rank paid at the next all-reduce. A flushed weight (< 1.2e-38 against a sum >= 1)
// changes no sum. With glibc's vector math library, 16 or 8 at a time (_ZGVeN16v_expf / _ZGVdN8v_expf, the
// functions -Ofast code calls; at most 1 ulp from expf, so results may differ from the scalar path in the last
// bit, never between ranks).
constexpr float kExpCutoff = -87.0f;
inline float exp_or_zero(float d) { return !(d >= kExpCutoff) ? 0.0f : std::exp(d); }  // NaN: 0, as the vector paths

#if defined(TP_HAVE_LIBMVEC)
// Declared with the features their vector arguments need: clang refuses calls whose argument ABI would change.
extern "C" __attribute__((target("avx512f"))) __m512 _ZGVeN16v_expf(__m512);
extern "C" __attribute__((target("avx2"))) __m256 _ZGVdN8v_expf(__m256);

// Lanes under the cutoff are clamped to it before the call (so none takes the fallback) and zeroed after.
__attribute__((target("avx512f"))) void exp_shifted_avx512(float* x, int n, float max_val) {
  const __m512 shift = _mm512_set1_ps(max_val), cutoff = _mm512_set1_ps(kExpCutoff);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i), shift);
    const __mmask16 keep = _mm512_cmp_ps_mask(d, cutoff, _CMP_GE_OQ);
    // (maskz_max: GCC 12 warns about the undefined source operand of _mm512_max_ps.)
    _mm512_storeu_ps(x + i, _mm512_maskz_mov_ps(
                                keep, _ZGVeN16v_expf(_mm512_maskz_max_ps(static_cast<__mmask16>(0xFFFF), d, cutoff))));
  }
  for (; i < n; ++i) x[i] = exp_or_zero(x[i] - max_val);
}

__attribute__((target("avx2"))) void exp_shifted_avx2(float* x, int n, float max_val) {
  const __m256 shift = _mm256_set1_ps(max_val), cutoff = _mm256_set1_ps(kExpCutoff);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), shift);
    const __m256 keep = _mm256_cmp_ps(d, cutoff, _CMP_GE_OQ);
    _mm256_storeu_ps(x + i, _mm256_and_ps(keep, _ZGVdN8v_expf(_mm256_max_ps(d, cutoff))));
  }
  for (; i < n; ++i) x[i] = exp_or_zero(x[i] - max_val);
}
#endif

void exp_shifted(float* x, int n, float max_val) {
#if defined(TP_HAVE_LIBMVEC)
  static const int level = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
  if (level == 2) return exp_shifted_avx512(x, n, max_val);
  if (level == 1) return exp_shifted_avx2(x, n, max_val);
#endif
  for (int i = 0; i < n; ++i) x[i] = exp_or_zero(x[i] - max_val);
}

}  // namespace

TP_MULTIVERSION void matmul(float* __restrict out, const float* __restrict w, const float* __restrict x, int rows,
                            int cols, int n_tokens) {
  if (n_tokens == 1) {  // decode: the plain matrix-vector loop (same sums, tuned for one vector)
    matvec(out, w, x, rows, cols);
    return;
  }
  const size_t stride = static_cast<size_t>(cols);
  const size_t out_stride = static_cast<size_t>(rows);
  const int body = cols / 8 * 8;
  int i = 0;
  for (; i + 4 <= rows; i += 4) {
    const float* wi = w + static_cast<size_t>(i) * stride;
    int t = 0;
    for (; t + 2 <= n_tokens; t += 2) {
      dot_block<4, 2>(out + static_cast<size_t>(t) * out_stride + i, out_stride, wi, stride,
                      x + static_cast<size_t>(t) * stride, stride, body, cols);
    }
    for (; t < n_tokens; ++t) {
      dot_block<4, 1>(out + static_cast<size_t>(t) * out_stride + i, out_stride, wi, stride,
                      x + static_cast<size_t>(t) * stride, stride, body, cols);
    }
  }
  for (; i < rows; ++i) {
    const float* wi = w + static_cast<size_t>(i) * stride;
    for (int t = 0; t < n_tokens; ++t) {
      dot_block<1, 1>(out + static_cast<size_t>(t) * out_stride + i, out_stride, wi, stride,
                      x + static_cast<size_t>(t) * stride, stride, body, cols);
    }
  }
}

// out[rows] = W[rows x cols] · x
TP_MULTIVERSION void matvec(float* __restrict out, const float* __restrict w, const float* __restrict x, int rows,
                            int cols) {
  const size_t stride = static_cast<size_t>(cols);
  const int body = cols / 8 * 8;
  int i = 0;
  for (; i + 4 <= rows; i += 4) {
    const float* w0 = w + static_cast<size_t>(i) * stride;
    const float* w1 = w0 + stride;
    const float* w2 = w1 + stride;
    const float* w3 = w2 + stride;
    float a0[8] = {0, 0, 0, 0, 0, 0, 0, 0}, a1[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float a2[8] = {0, 0, 0, 0, 0, 0, 0, 0}, a3[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < body; j += 8) {
      for (int k = 0; k < 8; ++k) {
        a0[k] += w0[j + k] * x[j + k];
        a1[k] += w1[j + k] * x[j + k];
        a2[k] += w2[j + k] * x[j + k];
        a3[k] += w3[j + k] * x[j + k];
      }
    }
    out[i] = finish_row(a0, w0, x, body, cols);
    out[i + 1] = finish_row(a1, w1, x, body, cols);
    out[i + 2] = finish_row(a2, w2, x, body, cols);
    out[i + 3] = finish_row(a3, w3, x, body, cols);
  }
  for (; i < rows; ++i) {
    const float* w0 = w + static_cast<size_t>(i) * stride;
    float a0[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < body; j += 8) {
      for (int k = 0; k < 8; ++k) a0[k] += w0[j + k] * x[j + k];
    }
    out[i] = finish_row(a0, w0, x, body, cols);
  }
}

TP_MULTIVERSION void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
  float ss = 0.0f;
  for (int j = 0; j < n; ++j) ss += x[j] * x[j];
  ss /= static_cast<float>(n);
  ss += eps;
  ss = 1.0f / std::sqrt(ss);
  for (int j = 0; j < n; ++j) out[j] = weight[j] * (ss * x[j]);
}

// Softmax as run.c computes it (left-to-right sum, a division per element); the max and the scaling, whose order
// does not matter, run eight lanes wide.
TP_MULTIVERSION void softmax(float* x, int n) {
  const int body = n / 8 * 8;
  float lane_max[8];
  for (int u = 0; u < 8; ++u) lane_max[u] = x[0];
  for (int i = 0; i < body; i += 8) {
    for (int u = 0; u < 8; ++u) lane_max[u] = x[i + u] > lane_max[u] ? x[i + u] : lane_max[u];
  }
  float max_val = x[0];
  for (int u = 0; u < 8; ++u) max_val = lane_max[u] > max_val ? lane_max[u] : max_val;
  for (int i = body; i < n; ++i) max_val = x[i] > max_val ? x[i] : max_val;
  exp_shifted(x, n, max_val);
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += x[i];
  const float inv = sum;  // a division, not a reciprocal multiply: rounds exactly like run.c
  for (int i = 0; i < body; i += 8) {
    for (int u = 0; u < 8; ++u) x[i + u] /= inv;
  }
  for (int i = body; i < n; ++i) x[i] /= inv;
}

}  // namespace tp_inference
