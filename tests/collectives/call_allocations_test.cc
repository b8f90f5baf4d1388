// The small-message path costs no allocation per call: over shared memory (the fast path) a call that repeats its
// collective's shape allocates nothing, in the library or the transport. Counted by this binary's operator new
// while a call runs (both ranks' threads count).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "collectives/harness.h"

namespace {

std::atomic<bool> counting{false};
std::atomic<long> allocations{0};

}  // namespace

// Out of line, so the compiler does not pair an inlined malloc with a delete it sees.
__attribute__((noinline)) void* allocate(std::size_t bytes) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(bytes == 0 ? 1 : bytes);
}
__attribute__((noinline)) void release(void* p) noexcept { std::free(p); }

void* operator new(std::size_t bytes) {
  if (void* p = allocate(bytes)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t bytes) { return operator new(bytes); }
// Every form that pairs with the plain delete is replaced too: a sanitizer's own nothrow new (std::stable_sort's
// buffer) freed by this delete would be reported as a mismatch.
void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept { return allocate(bytes); }
void* operator new[](std::size_t bytes, const std::nothrow_t&) noexcept { return allocate(bytes); }
void operator delete(void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }

namespace tbcoll::test {
namespace {

TEST(CallAllocations, TheCounterCounts) {
  allocations = 0;
  counting = true;
  auto* made = new std::vector<int>(5);
  counting = false;
  delete made;
  EXPECT_EQ(allocations.load(), 2) << "the vector and its elements";
}

TEST(CallAllocations, SmallCallsOverSharedMemoryAllocateNothing) {
  for (const char* algo : {"", "allreduce:oneshot"}) {
    std::atomic<int> ready{0};
    run_ranks(2, {"shm", algo}, [&](Communicator& comm) {
      std::vector<float> send(2, 1.0f), recv(2);
      for (int i = 0; i < 100; ++i) comm.all_reduce(send.data(), recv.data(), 2, DataType::kFloat32, ReduceOp::kSum);
      comm.barrier();
      // Counting starts once both ranks are out of the barrier (whose first call may still be growing its
      // request table on the other thread), and before either calls again.
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      if (comm.rank() == 0) {
        allocations = 0;
        counting = true;
        ready.fetch_add(1);
      }
      while (ready.load() < 3) {
      }
      for (int i = 0; i < 1000; ++i) comm.all_reduce(send.data(), recv.data(), 2, DataType::kFloat32, ReduceOp::kSum);
      ready.fetch_add(1);
      while (ready.load() < 5) {
      }
      if (comm.rank() == 0) counting = false;
      EXPECT_EQ(recv[0], 2.0f);
    });
    EXPECT_EQ(allocations.load(), 0) << "allocations in 2 x 1000 calls of 8 B (" << (algo[0] ? algo : "auto") << ")";
  }
}

}  // namespace
}  // namespace tbcoll::test
