// Levelled logging to stderr through fmt. Quiet by default (WARN); TBCOLL_DEBUG=INFO|TRACE for more.
#pragma once

#include <string>
#include <vector>

#include <fmt/format.h>

namespace tbcoll::log {

enum class Level { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

/// Current level (read once from TBCOLL_DEBUG).
Level level();
/// Writes one line "tbcoll LEVEL: message" to stderr atomically, with the job's secret and token (TBCOLL_SECRET,
/// TBCOLL_TOKEN; 8 bytes or more) replaced by "***" wherever they appear: no log line ever carries them.
void write(Level lvl, const std::string& message);
/// message with every occurrence of each secret (those shorter than 8 bytes left alone) replaced by "***".
std::string masked(std::string message, const std::vector<std::string>& secrets);

template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  if (level() >= Level::kWarn) write(Level::kWarn, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  if (level() >= Level::kInfo) write(Level::kInfo, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void trace(fmt::format_string<Args...> format, Args&&... args) {
  if (level() >= Level::kTrace) write(Level::kTrace, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tbcoll::log
