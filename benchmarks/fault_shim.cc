// Test-only LD_PRELOAD shim for tbcoll-perf: Communicator::all_reduce on f32 data works on the first call of
// each count, in place and out of place, and does nothing on the later ones (the benchmark's own reductions, of
// i64 and f64, go through).
// A benchmark whose timed calls stop working must not report "0 OK" (tbcoll_perf_timed_calls_are_checked).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <utility>

#include "tbcoll/tbcoll.hpp"

namespace tbcoll {

void Communicator::all_reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op) {
  using Real = void (*)(Communicator*, const void*, void*, size_t, DataType, ReduceOp);
  static const Real real = reinterpret_cast<Real>(
      dlsym(RTLD_NEXT, "_ZN6tbcoll12Communicator10all_reduceEPKvPvmNS_8DataTypeENS_8ReduceOpE"));
  static std::set<std::pair<size_t, bool>> seen;  // (count, in place) whose first call ran
  if (real == nullptr) {
    std::fprintf(stderr, "fault_shim: the real all_reduce is not found\n");
    std::abort();
  }
  if (dtype == DataType::kFloat32 && !seen.insert({count, send == recv}).second) return;  // later: does nothing
  real(this, send, recv, count, dtype, op);
}

}  // namespace tbcoll
