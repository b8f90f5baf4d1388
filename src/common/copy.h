// Copies for large outputs that will not be read again soon, and the cache hint for lines another core reads.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "platform/platform.h"

namespace tbcoll {

/// Asks for the lines of [at, at + bytes) in exclusive state (prefetchw), as a core does that writes them soon
/// while another core holds copies it read: the invalidation round trip happens now, not at the write. A hint:
/// no data changes, and the write stays correct whoever holds the lines by then.
inline void take_exclusive(const void* at, size_t bytes) {
  const auto* base = static_cast<const uint8_t*>(at);
  for (size_t line = 0; line < bytes; line += platform::kCacheLineBytes) {
#if defined(__x86_64__)
    asm volatile("prefetchw %0" : : "m"(*(base + line)));
#else
    __builtin_prefetch(base + line, 1);
#endif
  }
}

/// The message size from which copies into a small ring of reused buffers that a device reads (an RDMA
/// transport's send slots) go through stream_copy: a message larger than half the last-level cache streams past it
/// and evicts the ring, whose lines plain stores would then read in from memory first; a smaller message leaves
/// the ring cached, where plain stores are faster (on a 480 MiB-L3 Xeon, 16 MiB messages through 512 KiB slots:
/// 134 ps per byte of transport CPU with plain stores, 158 with streaming ones). 16 MiB at least, and where the
/// cache size is unknown.
inline size_t stream_from_bytes() {
  static const size_t bytes = std::max<size_t>(size_t{16} << 20, platform::last_level_cache_bytes() / 2);
  return bytes;
}

/// memcpy with non-temporal stores: dst goes to memory without first being read into the cache (no
/// read-for-ownership), which saves a third of the DRAM traffic of a copy whose destination is not cached.
/// For destinations far larger than the caches only. Fenced: the stores are visible in program order with
/// later stores when it returns.
inline void stream_copy(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  if (bytes < head + 64) {
    std::memcpy(d, s, bytes);
    return;
  }
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
  }
  std::memcpy(d, s, bytes);
  _mm_sfence();
#else
  std::memcpy(dst, src, bytes);
#endif
}

}  // namespace tbcoll
