// Throughput of the reduction kernels: out = a + b over buffers of 4 KiB (L1), 256 KiB (L2), 4 MiB (L3) and 64 MiB (memory).
//
// bytes_per_second counts the payload, i.e. the bytes of one input buffer per call (what a reduction must keep
// up with on the wire); the memory traffic is three times that (two reads, one write).
//
// Default runs use kernel(), the table chosen for this CPU. The "_avx2" / "_baseline" variants force another
// instruction set to show what the dispatch buys; they are skipped where the CPU cannot run them.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "reduce/reduce.h"

namespace tbcoll::reduce {
namespace {

constexpr int kBestIsa = -1;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

Buffer make_buffer(size_t bytes, unsigned char seed) {
  Buffer buffer(static_cast<unsigned char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
  // Small positive values in every dtype (0x3c/0x3f high bytes): no NaN/inf/subnormal slow paths, no overflow.
  for (size_t i = 0; i < bytes; ++i) buffer.get()[i] = (i % 2) ? 0x3c : static_cast<unsigned char>(seed + i);
  return buffer;
}

size_t element_size(DataType dtype) { return dtype == DataType::kFloat32 ? 4 : 2; }

void bm_sum(benchmark::State& state, DataType dtype, int isa, bool in_place) {
  const Kernel k =
      isa == kBestIsa ? kernel(dtype, ReduceOp::kSum) : kernel_for_isa(dtype, ReduceOp::kSum, static_cast<Isa>(isa));
  if (k == nullptr) {
    state.SkipWithError("this CPU cannot run this instruction set");
    return;
  }
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / element_size(dtype);
  Buffer a = make_buffer(bytes, 1), b = make_buffer(bytes, 2), out = make_buffer(bytes, 3);
  // In place (out == a) is what the algorithms do with their receive buffer. Re-adding b to a keeps the values
  // finite for the handful of seconds a run lasts (f16 saturates to inf at worst, which costs nothing extra).
  unsigned char* destination = in_place ? a.get() : out.get();
  for (auto _ : state) {
    k(destination, a.get(), b.get(), count);
    benchmark::DoNotOptimize(destination);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  state.SetLabel(isa == kBestIsa ? isa_name(best_isa()) : isa_name(static_cast<Isa>(isa)));
}

void sizes(benchmark::internal::Benchmark* b) { b->Arg(4 << 10)->Arg(256 << 10)->Arg(4 << 20)->Arg(64 << 20); }

constexpr int kAvx2 = static_cast<int>(Isa::kAvx2);
constexpr int kBaseline = static_cast<int>(Isa::kBaseline);

BENCHMARK_CAPTURE(bm_sum, f32, DataType::kFloat32, kBestIsa, false)->Apply(sizes);
BENCHMARK_CAPTURE(bm_sum, bf16, DataType::kBfloat16, kBestIsa, false)->Apply(sizes);
BENCHMARK_CAPTURE(bm_sum, f16, DataType::kFloat16, kBestIsa, false)->Apply(sizes);
BENCHMARK_CAPTURE(bm_sum, f32_in_place, DataType::kFloat32, kBestIsa, true)->Apply(sizes);
BENCHMARK_CAPTURE(bm_sum, bf16_in_place, DataType::kBfloat16, kBestIsa, true)->Apply(sizes);
BENCHMARK_CAPTURE(bm_sum, f16_in_place, DataType::kFloat16, kBestIsa, true)->Apply(sizes);
BENCHMARK_CAPTURE(bm_sum, f32_avx2, DataType::kFloat32, kAvx2, false)->Apply(sizes);
BENCHMARK_CAPTURE(bm_sum, bf16_avx2, DataType::kBfloat16, kAvx2, false)->Apply(sizes);
BENCHMARK_CAPTURE(bm_sum, f16_avx2, DataType::kFloat16, kAvx2, false)->Apply(sizes);
BENCHMARK_CAPTURE(bm_sum, f32_baseline, DataType::kFloat32, kBaseline, false)->Apply(sizes);
BENCHMARK_CAPTURE(bm_sum, bf16_baseline, DataType::kBfloat16, kBaseline, false)->Apply(sizes);
BENCHMARK_CAPTURE(bm_sum, f16_baseline, DataType::kFloat16, kBaseline, false)->Apply(sizes);

}  // namespace
}  // namespace tbcoll::reduce

BENCHMARK_MAIN();
