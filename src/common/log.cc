#include "common/log.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>

#include "common/env.h"

namespace tbcoll::log {

static Level parse_level() {
  std::string text = env::get("TBCOLL_DEBUG");
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::toupper(c); });
  if (text == "NONE" || text == "OFF") return Level::kNone;
  if (text == "INFO") return Level::kInfo;
  if (text == "TRACE") return Level::kTrace;
  return Level::kWarn;
}

Level level() {
  static const Level cached = parse_level();
  return cached;
}

std::string masked(std::string message, const std::vector<std::string>& secrets) {
  for (const std::string& secret : secrets) {
    if (secret.size() < 8) continue;  // shorter ones (the default token "tbcoll") would mangle words
    for (size_t at = message.find(secret); at != std::string::npos; at = message.find(secret, at + 3)) {
      message.replace(at, secret.size(), "***");
    }
  }
  return message;
}

void write(Level lvl, const std::string& message) {
  const char* name = lvl == Level::kWarn ? "WARN" : lvl == Level::kInfo ? "INFO" : "TRACE";
  std::vector<std::string> secrets;
  for (const char* variable : {"TBCOLL_SECRET", "TBCOLL_TOKEN"}) {
    const std::string value = env::get(variable);
    if (value != "tbcoll") secrets.push_back(value);
  }
  std::string line = fmt::format("tbcoll {} [pid {}]: {}\n", name, static_cast<long>(getpid()),
                                 masked(message, secrets));
  // One write() per line so lines from ranks and threads don't interleave.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace tbcoll::log
