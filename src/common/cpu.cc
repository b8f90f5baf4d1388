#include "common/cpu.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "common/env.h"
#include "platform/platform.h"
#include "tbcoll/error.hpp"

namespace tbcoll {

// Where the system has no affinity to ask (macOS, plain POSIX), every online CPU: the cost model can then tell 8
// ranks on a 2-CPU machine from 8 ranks with a CPU each. Empty only when even the count is unknown.
std::vector<int> allowed_cpus() {
  std::vector<int> cpus = platform::allowed_cpus();
  if (cpus.empty()) {
    const unsigned online = std::thread::hardware_concurrency();
    for (unsigned cpu = 0; cpu < online; ++cpu) cpus.push_back(static_cast<int>(cpu));
  }
  return cpus;
}

std::string format_cpus(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<int> parse_cpus(const std::string& text) {
  std::vector<int> cpus;
  size_t at = 0;
  auto number = [&]() {
    size_t start = at;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9' && at - start < 6) ++at;
    if (at == start) throw InvalidArgument(fmt::format("CPU list {:?}: expected a number at {}", text, start));
    return std::atoi(text.substr(start, at - start).c_str());
  };
  while (at < text.size()) {
    int first = number(), last = first;
    if (at < text.size() && text[at] == '-') {
      ++at;
      last = number();
    }
    if (last < first || last >= platform::kMaxCpus) throw InvalidArgument(fmt::format("CPU list {:?}: bad range", text));
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
    if (at < text.size() && text[at++] != ',') throw InvalidArgument(fmt::format("CPU list {:?}: expected ','", text));
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

transport::SpinYield spin_yield_policy(const std::vector<int>& mine,
                                       const std::vector<std::vector<int>>& same_machine_peers, bool crowded) {
  using transport::SpinYield;
  const long long forced = env::get_int("TBCOLL_SPIN_YIELD");
  if (forced >= 0 && forced <= 2) return static_cast<SpinYield>(forced);
  if (forced != -1) throw InvalidArgument(fmt::format("[env] TBCOLL_SPIN_YIELD={} must be -1, 0, 1 or 2", forced));
  if (crowded) return SpinYield::kEveryPoll;
  if (mine.empty()) return same_machine_peers.empty() ? SpinYield::kNever : SpinYield::kNowAndThen;
  for (const std::vector<int>& theirs : same_machine_peers) {
    if (theirs.empty()) return SpinYield::kNowAndThen;  // a peer that could not tell: assume it may share
    std::vector<int> common;
    std::set_intersection(mine.begin(), mine.end(), theirs.begin(), theirs.end(), std::back_inserter(common));
    if (!common.empty()) return SpinYield::kNowAndThen;
  }
  return SpinYield::kNever;
}

double machine_crowding(const std::vector<std::vector<int>>& cpus_by_rank, const std::vector<std::string>& kernel_by_rank) {
  std::map<std::string, std::pair<int, std::set<int>>> per_machine;  // kernel -> ranks, CPUs they may use
  for (size_t r = 0; r < cpus_by_rank.size() && r < kernel_by_rank.size(); ++r) {
    auto& [ranks, cpus] = per_machine[kernel_by_rank[r]];
    ++ranks;
    cpus.insert(cpus_by_rank[r].begin(), cpus_by_rank[r].end());
    if (cpus_by_rank[r].empty()) cpus.insert(-1 - static_cast<int>(cpus.size()));  // unknown: a CPU of its own
  }
  double crowding = 1;
  for (const auto& [kernel, machine] : per_machine) {
    crowding = std::max(crowding, static_cast<double>(machine.first) / static_cast<double>(machine.second.size()));
  }
  return crowding;
}

namespace {
thread_local bool sharing_cpu = false;
}  // namespace

void mark_thread_sharing_cpu() { sharing_cpu = true; }
bool thread_shares_cpu() { return sharing_cpu; }

}  // namespace tbcoll
