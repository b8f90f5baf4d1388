// Running the programs the tests start and reading their output, header-only (the multiproc tests, the doctor's
// and the plug-ins' tests use it).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace tbcoll::test {

/// What a command printed (stdout and stderr) and its exit status (-1: it did not exit, a signal ended it).
struct CommandOutput {
  int status = -1;
  std::string text;
};

/// Runs `command` through sh, its stderr with its stdout, and waits for it.
inline CommandOutput run_command(const std::string& command) {
  CommandOutput out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.text.append(buffer, n);
  const int status = pclose(pipe);
  out.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

/// How many times needle occurs in text (overlapping occurrences included).
inline int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace tbcoll::test
