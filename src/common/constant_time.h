// Comparisons whose time does not depend on where two secrets first differ (job tokens, proofs, MACs): a peer
// timing its rejections must not learn a token byte by byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tbcoll {

/// Whether a[0..n) equals b[0..n), looking at every byte whatever the first difference.
inline bool constant_time_equal(const void* a, const void* b, size_t n) {
  const auto* x = static_cast<const volatile uint8_t*>(a);
  const auto* y = static_cast<const volatile uint8_t*>(b);
  uint8_t differs = 0;
  for (size_t i = 0; i < n; ++i) differs = static_cast<uint8_t>(differs | (x[i] ^ y[i]));
  return differs == 0;
}

/// Whether two strings are equal: their lengths may show, their contents do not (every byte of `expected` is
/// looked at whatever `given` holds).
inline bool constant_time_equal(const std::string& given, const std::string& expected) {
  uint8_t differs = given.size() == expected.size() ? 0 : 1;
  const auto* x = reinterpret_cast<const volatile uint8_t*>(given.data());
  const auto* y = reinterpret_cast<const volatile uint8_t*>(expected.data());
  for (size_t i = 0; i < expected.size(); ++i) {
    const uint8_t theirs = i < given.size() ? x[i] : static_cast<uint8_t>(~y[i]);
    differs = static_cast<uint8_t>(differs | (theirs ^ y[i]));
  }
  return differs == 0;
}

}  // namespace tbcoll
