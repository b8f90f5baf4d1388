// Reduction kernels: a dtype x op table of plain functions, the inner loop of every reducing collective.
//
// kernel(dtype, op) looks the function up once; the algorithms then call it on each received chunk. Each entry is
// compiled for every instruction set of the architecture (x86-64: AVX-512, AVX2 + F16C; arm64: NEON) and for the
// portable baseline, and the table for the best one this CPU supports is chosen at first use, so a portable -O2
// build still runs AVX-512 code where it exists. Every variant
// gives bitwise identical results (same scalar semantics, no FMA contraction, no reassociation), so ranks on
// different CPUs agree; the one exception is which payload a NaN result carries when both inputs are NaN.
//
// f16/bf16 values are widened to f32, combined in f32 and rounded back to nearest even at every step. f32's 24-bit
// significand is at least 2p + 2 bits for both formats (p = 11, 8), so this double rounding is innocuous: the
// result is the correctly rounded 16-bit sum / product / quotient.
//
// All functions are pure and thread-safe; none allocates. Buffers are owned by the caller.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tbcoll/tbcoll.hpp"

namespace tbcoll::reduce {

// out[i] = a[i] op b[i] for i < count. out may be the same pointer as a or b (exact aliasing only).
//
// Integers wrap modulo 2^bits. Floats: IEEE ops in the dtype's precision (f16/bf16 via f32, see above).
// kMax/kMin on floats propagate NaN: if either input is NaN the result is NaN (which of the two NaN payloads is
// not specified); otherwise max = (a > b ? a : b), so max(-0, +0) is the second operand.
using Kernel = void (*)(void* out, const void* a, const void* b, size_t count);

// The kernel for (dtype, op). kAvg returns the sum kernel (the caller divides once at the end with divide()).
// Throws tbcoll::InvalidArgument naming the value for an unknown dtype or op.
Kernel kernel(DataType dtype, ReduceOp op);

inline void apply(void* out, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op) {
  kernel(dtype, op)(out, a, b, count);
}

// out[i] = in[i] / divisor (finishing step of kAvg). Integers: C++ integer division truncating toward zero.
// Floats: division in the type's precision (f16/bf16 computed in f32 and rounded back). out may equal in.
// Throws InvalidArgument for an unknown dtype, divisor == 0, or a negative divisor with an unsigned dtype.
// Signed integers divided by -1 wrap (INT_MIN / -1 == INT_MIN) instead of trapping.
void divide(void* out, const void* in, size_t count, DataType dtype, int divisor);

// out = input(0) op input(1) op ... op input(n-1) over count elements, folded in rank order, so every rank that
// reduces the same inputs holds bitwise identical results; for kAvg (kernel is the sum's) divided by n at the end.
// n >= 2; kernel = kernel(dtype, op). input(p) is called once per rank, in rank order, and returns that rank's
// elements; the pointer must stay valid until input(p + 2) is called (two buffers taking turns suffice). out may be
// input(0) or input(1) exactly, never a later input.
template <typename Input>
void reduce_ranks(void* out, int n, size_t count, DataType dtype, ReduceOp op, Kernel kernel, Input&& input) {
  const void* first = input(0);
  kernel(out, first, input(1), count);
  for (int p = 2; p < n; ++p) kernel(out, out, input(p), count);
  if (op == ReduceOp::kAvg) divide(out, out, count, dtype, n);
}


// IEEE half and bfloat16 conversions; float->half/bf16 round to nearest even, NaN stays NaN, overflow -> inf.
// Subnormals are kept in both directions (no flush to zero). NaNs come out quiet with their top payload bits
// kept, as x86 F16C instructions do; bf16_to_float is exact (a 16-bit shift), so it keeps signalling NaNs.
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

// ---- for tests and benchmarks ----------------------------------------------------------------------------------

// Instruction sets the table is compiled for. kernel() uses the best one the CPU supports.
enum class Isa : int { kBaseline = 0, kAvx2 = 1, kAvx512 = 2, kNeon = 3 };

// The best instruction set of this CPU (what kernel() uses).
Isa best_isa();

// The kernel for (dtype, op) compiled for isa, or nullptr if this CPU (or this build) cannot run it.
// Throws InvalidArgument like kernel().
Kernel kernel_for_isa(DataType dtype, ReduceOp op, Isa isa);

// "baseline", "avx2", "avx512", "neon".
const char* isa_name(Isa isa);

}  // namespace tbcoll::reduce
