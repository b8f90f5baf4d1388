// tbcoll-doctor: reads the flight recorder's files (src/flight/flight_file.h), which every rank of a communicator
// writes as it runs, and says what went on, from any process and at any moment (while the job runs, after it
// failed, while a rank is stopped):
//
//   tbcoll-doctor [DIR|FILE...]                  a verdict in words per communicator (tools/doctor/verdict.h)
//   tbcoll-doctor show [--calls N] FILE...       each file in full: header, state, reason, peers, last calls
//   tbcoll-doctor live [DIR] [--every S] [--times N]   per rank and peer: calls, bytes, time waited, slowest link
//
// DIR defaults to TBCOLL_FLIGHT_DIR, else ${TMPDIR:-/tmp}/tbcoll-flight-<uid> (where the library writes).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "flight/flight_file.h"
#include "platform/platform.h"
#include "tbcoll/error.hpp"
#include "tools/doctor/report.h"
#include "tools/doctor/verdict.h"

namespace {

namespace flight = tbcoll::flight;
namespace doctor = tbcoll::doctor;

constexpr int kExitNoFiles = 1;
constexpr int kExitUsage = 2;
constexpr size_t kDefaultShownCalls = 20;

const char kUsage[] =
    "usage: tbcoll-doctor [DIR|FILE...]                 a verdict in words per communicator\n"
    "       tbcoll-doctor show [--calls N] FILE...      each file in full (N: last calls shown, 0 all; 20)\n"
    "       tbcoll-doctor live [DIR] [--every SECONDS] [--times N]\n"
    "                                                   per rank and peer: calls, bytes, time waited\n"
    "DIR defaults to TBCOLL_FLIGHT_DIR, else ${TMPDIR:-/tmp}/tbcoll-flight-<uid>.\n";

int usage_error(const std::string& what) {
  std::fprintf(stderr, "tbcoll-doctor: %s (try tbcoll-doctor --help)\n", what.c_str());
  return kExitUsage;
}

std::string default_dir() {
  if (const char* dir = std::getenv("TBCOLL_FLIGHT_DIR"); dir != nullptr && *dir != '\0') return dir;
  return tbcoll::flight::default_dir();
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The files the arguments name (directories: their *.flight files), read; what cannot be read goes to `problems`.
std::vector<flight::Dump> read_all(const std::vector<std::string>& arguments, std::vector<std::string>& problems) {
  std::vector<std::string> paths;
  for (const std::string& argument : arguments) {
    if (!is_directory(argument)) {
      paths.push_back(argument);
      continue;
    }
    try {
      for (std::string& path : flight::files_in(argument)) paths.push_back(std::move(path));
    } catch (const tbcoll::Error& error) {
      problems.push_back(error.what());
    }
  }
  std::vector<flight::Dump> dumps;
  for (const std::string& path : paths) {
    try {
      dumps.push_back(flight::read_file(path));
    } catch (const tbcoll::Error& error) {
      problems.push_back(error.what());
    }
  }
  return dumps;
}

// The ranks whose process ran on this host and is gone (a file says where and which process wrote it).
std::set<int> ended_here(const std::vector<flight::Dump>& dumps) {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return {};
  std::set<int> ended;
  for (const flight::Dump& dump : dumps) {
    if (dump.host == name && dump.pid > 0 && !tbcoll::platform::process_exists(static_cast<int>(dump.pid))) {
      ended.insert(dump.rank);
    }
  }
  return ended;
}

std::string where(const std::vector<std::string>& arguments) {
  std::string out;
  for (const std::string& argument : arguments) out += (out.empty() ? "" : ", ") + argument;
  return out;
}

int verdicts(std::vector<std::string> arguments) {
  if (arguments.empty()) arguments.push_back(default_dir());
  std::vector<std::string> problems;
  std::vector<flight::Dump> dumps = read_all(arguments, problems);
  for (const std::string& problem : problems) std::printf("skipped: %s\n", problem.c_str());
  if (dumps.empty()) {
    std::printf("no flight files in %s\n", where(arguments).c_str());
    return kExitNoFiles;
  }
  for (const auto& [comm_id, ranks] : doctor::by_communicator(std::move(dumps))) {
    int size = 0;
    for (const flight::Dump& dump : ranks) size = std::max(size, dump.size);
    std::printf("%s, %zu file%s:\n", doctor::communicator_title(comm_id, size).c_str(), ranks.size(),
                ranks.size() == 1 ? "" : "s");
    for (const std::string& line : doctor::verdict(ranks, ended_here(ranks))) std::printf("  %s\n", line.c_str());
  }
  return 0;
}

int show(const std::vector<std::string>& arguments) {
  size_t shown_calls = kDefaultShownCalls;
  std::vector<std::string> files;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i] != "--calls") {
      files.push_back(arguments[i]);
      continue;
    }
    char* end = nullptr;
    const char* value = i + 1 < arguments.size() ? arguments[++i].c_str() : "";
    const unsigned long long calls = std::strtoull(value, &end, 10);
    if (*value == '\0' || *end != '\0') return usage_error(std::string("--calls takes a number, not '") + value + "'");
    shown_calls = static_cast<size_t>(calls);
  }
  if (files.empty()) return usage_error("show needs a FILE");
  int status = 0;
  for (const std::string& file : files) {
    try {
      std::printf("%s", doctor::show(flight::read_file(file), shown_calls).c_str());
    } catch (const tbcoll::Error& error) {
      std::fprintf(stderr, "tbcoll-doctor: %s\n", error.what());
      status = kExitNoFiles;
    }
  }
  return status;
}

bool parse_number(const std::string& text, double& out) {
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return !text.empty() && *end == '\0' && out >= 0;
}

int live(const std::vector<std::string>& arguments) {
  std::vector<std::string> dirs;
  double every_s = 0, times = 0;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const std::string& argument = arguments[i];
    if (argument != "--every" && argument != "--times") {
      dirs.push_back(argument);
      continue;
    }
    const std::string value = i + 1 < arguments.size() ? arguments[++i] : "";
    if (!parse_number(value, argument == "--every" ? every_s : times) || (argument == "--every" && every_s == 0)) {
      return usage_error(argument + " takes a positive number, not '" + value + "'");
    }
  }
  if (dirs.size() > 1) return usage_error("live takes one DIR");
  if (dirs.empty()) dirs.push_back(default_dir());
  for (long round = 1;; ++round) {
    std::vector<std::string> problems;
    std::vector<flight::Dump> dumps = read_all(dirs, problems);
    for (const std::string& problem : problems) std::printf("skipped: %s\n", problem.c_str());
    if (dumps.empty()) std::printf("no flight files in %s\n", dirs[0].c_str());
    for (const auto& [comm_id, ranks] : doctor::by_communicator(std::move(dumps))) {
      std::printf("%s", doctor::live(ranks).c_str());
    }
    std::fflush(stdout);
    if (every_s == 0 || (times > 0 && static_cast<double>(round) >= times)) return 0;
    std::this_thread::sleep_for(std::chrono::duration<double>(every_s));
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> arguments(argv + 1, argv + argc);
  if (!arguments.empty() && (arguments[0] == "-h" || arguments[0] == "--help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (!arguments.empty() && arguments[0] == "--version") {
    std::printf("tbcoll-doctor %s\n", TBCOLL_VERSION);
    return 0;
  }
  if (!arguments.empty() && arguments[0].size() > 1 && arguments[0][0] == '-') {
    return usage_error("unknown option '" + arguments[0] + "'");
  }
  const std::string command = arguments.empty() ? "" : arguments[0];
  if (command == "show") return show({arguments.begin() + 1, arguments.end()});
  if (command == "live") return live({arguments.begin() + 1, arguments.end()});
  return verdicts(arguments);
}
