// Reading the output of the programs the multi-process tests run, header-only (each multiproc test file uses it).
#pragma once

#include <string>

namespace tbcoll::test {

/// How many times needle occurs in text (overlapping occurrences included).
inline int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace tbcoll::test
