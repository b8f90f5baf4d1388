// What every fuzz target shares: FUZZ_CHECK (an invariant that must hold on every input: abort, which libFuzzer
// reports as a crash and saves the input), and a reader that turns the input into fields.
//
// A target is a function LLVMFuzzerTestOneInput(data, size) that returns 0. It runs under libFuzzer in build-fuzz
// (tools/fuzz.sh, clang -fsanitize=fuzzer,address,undefined) and, in every other build, under replay_main.cc: ctest
// replays fuzz/corpus/<target>/ (the seeds and every input that once found a bug) through each target.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#define FUZZ_CHECK(condition)                                                                          \
  do {                                                                                                 \
    if (!(condition)) {                                                                                \
      std::fprintf(stderr, "fuzz invariant broken at %s:%d: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                                    \
    }                                                                                                  \
  } while (0)

namespace tbcoll_fuzz {

/// Takes fields off the front of the input; past its end every field reads as zero (never out of bounds).
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  template <typename T>
  T take() {
    T value{};
    const size_t n = std::min(sizeof(T), size_ - at_);
    if (n > 0) std::memcpy(&value, data_ + at_, n);
    at_ += n;
    return value;
  }
  /// Up to n bytes as a string.
  std::string bytes(size_t n) {
    n = std::min(n, size_ - at_);
    std::string out(reinterpret_cast<const char*>(data_ + at_), n);
    at_ += n;
    return out;
  }
  std::string rest() { return bytes(size_ - at_); }
  size_t left() const { return size_ - at_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

}  // namespace tbcoll_fuzz
