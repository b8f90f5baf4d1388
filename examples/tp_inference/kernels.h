// The numeric kernels of the Llama forward pass: matrix products, RMS norm and softmax, each summing in llama2.c
// run.c's order (so greedy output matches it). Plain C++ loops shaped so that -O2 vectorises them, no intrinsics but
// glibc's vector expf; they allocate nothing and may be called from any thread.
//
// The hot loops are compiled three times, for x86-64-v4 (AVX-512), v3 (AVX2) and the baseline, and the loader
// picks the best the CPU runs (GCC function multiversioning, TP_MULTIVERSION): a portable -O2 build otherwise runs
// 128-bit SSE here, 1.5x slower than a plain C loop built with -march=native. kernels.cc and model.cc are built
// with -ffp-contract=off, so no version fuses a multiply and an add: every version computes the same sums in the
// same order, and the output does not depend on the CPU.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define TP_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TP_MULTIVERSION
#endif

namespace tp_inference {

/// out[t][rows] = W[rows x cols] · x[t] for n_tokens rows of x (row-major; out is n_tokens rows of `rows` floats).
/// Every (row, token) sum is the same sequence of operations whatever n_tokens and whichever rows surround it, so
/// neither batching nor sharding changes a result bit. out must not overlap w or x.
void matmul(float* __restrict out, const float* __restrict w, const float* __restrict x, int rows, int cols,
            int n_tokens);
/// out[rows] = W[rows x cols] · x: matmul for one token (what it runs then), the same sums.
void matvec(float* __restrict out, const float* __restrict w, const float* __restrict x, int rows, int cols);
/// out[j] = weight[j] * (x[j] / sqrt(mean of x^2 + eps)), n floats.
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps);
/// Softmax of n floats in place (n >= 1), as run.c computes it; results below float's normal range are 0.
void softmax(float* x, int n);

}  // namespace tp_inference
