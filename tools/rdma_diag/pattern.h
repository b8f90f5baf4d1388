// The pattern the raw-verbs checks send (raw_link.h): every byte of a message is checked against it on arrival,
// and a mismatch is reported by its offset, so corruption, a short message and a send from the wrong place all show.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tbcoll::ibverbs {

/// Word `index` of pattern `seed` of rank `sender` (splitmix64): one stream per seed and rank.
uint64_t pattern_word(uint64_t seed, int sender, size_t index);

/// Writes `bytes` of the pattern, from its word `first_word` on (a buffer's bytes from offset 8 x first_word).
void fill_pattern(uint8_t* at, size_t bytes, uint64_t seed, int sender, size_t first_word = 0);

/// "" when the `bytes` at `at` are the pattern from word `first_word` on; else the first byte that differs (its
/// offset from `at`, what it is and should be) and how many bytes differ.
std::string check_pattern(const uint8_t* at, size_t bytes, uint64_t seed, int sender, size_t first_word = 0);

/// "512 KiB", "16 MiB", "4097 B".
std::string size_text(size_t bytes);

}  // namespace tbcoll::ibverbs
