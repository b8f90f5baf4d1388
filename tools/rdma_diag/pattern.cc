#include "tools/rdma_diag/pattern.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace tbcoll::ibverbs {

uint64_t pattern_word(uint64_t seed, int sender, size_t index) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(sender) * 0xbf58476d1ce4e5b9ull + index + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void fill_pattern(uint8_t* at, size_t bytes, uint64_t seed, int sender, size_t first_word) {
  for (size_t j = 0; j * 8 < bytes; ++j) {
    const uint64_t word = pattern_word(seed, sender, first_word + j);
    std::memcpy(at + j * 8, &word, std::min<size_t>(8, bytes - j * 8));
  }
}

std::string check_pattern(const uint8_t* at, size_t bytes, uint64_t seed, int sender, size_t first_word) {
  size_t first = bytes, wrong = 0;
  uint8_t got = 0, want = 0;
  for (size_t j = 0; j * 8 < bytes; ++j) {
    const uint64_t expected = pattern_word(seed, sender, first_word + j);
    const size_t n = std::min<size_t>(8, bytes - j * 8);
    if (std::memcmp(at + j * 8, &expected, n) == 0) continue;
    uint8_t e[8];
    std::memcpy(e, &expected, 8);
    for (size_t b = 0; b < n; ++b) {
      if (at[j * 8 + b] == e[b]) continue;
      if (first == bytes) {
        first = j * 8 + b;
        got = at[first];
        want = e[b];
      }
      ++wrong;
    }
  }
  if (wrong == 0) return "";
  return fmt::format("byte {} is {:#04x}, not {:#04x} ({} of {} bytes differ): the data was corrupted on the way",
                     first, got, want, wrong, bytes);
}

std::string size_text(size_t bytes) {
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

}  // namespace tbcoll::ibverbs
