#include "tuner_measured.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "tbcoll/error.hpp"
#include "tuner.h"

namespace tbcoll {

int MeasuredChoices::octave(size_t bytes) {
  int k = 0;
  while (bytes > 1) {
    bytes >>= 1;
    ++k;
  }
  return k;
}

void MeasuredChoices::preset(OpKind kind, int octave, const Choice* choice, std::string from) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& entry = entries_[{static_cast<int>(kind), octave}];
  entry.decided = choice;
  entry.saved = std::move(from);
  has_saved_ = true;
}

MeasuredChoices::Pick MeasuredChoices::pick(const algo::CallShape& call, const Choice& model, const Tuner& tuner) {
  // A transport's fast path in its own range (as measured there), a forced algorithm, the size ranges: as chosen.
  if (model.fast_path_index >= 0 || tuner.forced(call.kind) || !tuner.config().use_model) return {&model};
  std::lock_guard<std::mutex> lock(mutex_);
  auto at = entries_.find(key_of(call));
  if (at == entries_.end()) {
    if (!measuring_) return {&model};
    at = entries_.emplace(key_of(call), Entry{}).first;
    Entry& entry = at->second;
    entry.candidates = tuner.shortlist(call, kShortlistFactor, kMaxCandidates);
    // From the model's figures, the same on every rank: every rank runs as many calls.
    const double predicted = entry.candidates.empty() ? 0 : entry.candidates[0]->cost(call, tuner.costs());
    const double wanted = predicted > 0 ? std::ceil(kTrialSeconds / predicted) : kMaxCalls;
    size_t calls = static_cast<size_t>(
        std::clamp(wanted, static_cast<double>(trials_), static_cast<double>(std::max(trials_, kMaxCalls))));
    entry.batch = std::max<size_t>(2, calls / 4);
    calls = entry.batch * std::max<size_t>(2, (calls + entry.batch - 1) / entry.batch);
    entry.seconds.assign(entry.candidates.size() * calls, 0.0);
  }
  Entry& entry = at->second;
  if (entry.decided != nullptr) return {entry.decided->refusal(call).empty() ? entry.decided : &model};
  const size_t m = entry.candidates.size();
  if (m < 2) return {&model};
  const size_t trial = entry.calls;  // < seconds.size(): decided after the last one
  const Choice* candidate = entry.candidates[candidate_of(entry, trial)];
  if (!candidate->refusal(call).empty()) return {&model, static_cast<int>(trial), true};
  return {candidate, static_cast<int>(trial)};
}

bool MeasuredChoices::record(const algo::CallShape& call, const Pick& pick, double seconds,
                             std::vector<double>* times) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& entry = entries_.at(key_of(call));
  const size_t trial = static_cast<size_t>(pick.trial);
  if (entry.decided != nullptr || trial != entry.calls || trial >= entry.seconds.size()) {
    throw Error(tbcollInternalError, fmt::format("measured tuning: trial {} recorded out of turn (next {} of {})",
                                                 pick.trial, entry.calls, entry.seconds.size()));
  }
  entry.seconds[trial] = pick.stand_in ? std::numeric_limits<double>::infinity() : seconds;
  if (++entry.calls < entry.seconds.size()) return false;
  *times = entry.seconds;
  return true;
}

void MeasuredChoices::decide(const algo::CallShape& call, const std::vector<double>& slowest) {
  std::unique_lock<std::mutex> lock(mutex_);
  Entry& entry = entries_.at(key_of(call));
  const size_t m = entry.candidates.size();
  if (slowest.size() != entry.seconds.size()) {
    throw Error(tbcollInternalError, fmt::format("measured tuning: {} times agreed for {} trials", slowest.size(),
                                                 entry.seconds.size()));
  }
  std::vector<std::vector<double>> counted(m);
  for (size_t i = 0; i < slowest.size(); ++i) {
    if (entry.batch == 1 || i % entry.batch != 0) counted[candidate_of(entry, i)].push_back(slowest[i]);
  }
  entry.typical.assign(m, 0.0);
  for (size_t c = 0; c < m; ++c) {
    std::sort(counted[c].begin(), counted[c].end());
    entry.typical[c] = counted[c][(counted[c].size() - 1) / 2];
  }
  entry.counted = counted[0].size();
  // Ties (and a shortlist none of which ran: every time infinite) go to the model's order.
  size_t winner = 0;
  for (size_t c = 1; c < m; ++c) {
    if (entry.typical[c] < entry.typical[winner]) winner = c;
  }
  entry.decided = entry.candidates[winner];
  if (!saver_) return;
  std::string times;
  for (size_t c = 0; c < m; ++c) {
    const double us = entry.typical[c] * 1e6;
    times += fmt::format("{}{}={}", c ? "," : "", entry.candidates[c]->name,
                         us < std::numeric_limits<double>::infinity() ? fmt::format("{:.1f}", us) : "inf");
  }
  const std::string name = entry.decided->name;
  lock.unlock();
  saver_(call.kind, octave(call.bytes), name, times);
}

std::string MeasuredChoices::decided(const algo::CallShape& call) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto at = entries_.find(key_of(call));
  return at == entries_.end() || at->second.decided == nullptr ? std::string() : at->second.decided->name;
}

std::string MeasuredChoices::describe(const algo::CallShape& call) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto at = entries_.find(key_of(call));
  if (at == entries_.end() || at->second.decided == nullptr) return "";
  const Entry& entry = at->second;
  if (!entry.saved.empty()) return entry.saved;
  std::string text;
  for (size_t c = 0; c < entry.candidates.size(); ++c) {
    const double us = entry.typical[c] * 1e6;
    text += fmt::format("{}{} {}", text.empty() ? "" : ", ", entry.candidates[c]->name,
                        us < std::numeric_limits<double>::infinity() ? fmt::format("{:.1f} us", us) : "(did not run)");
  }
  return fmt::format("{} (measured: the lower median of {} calls each, the slowest rank's time)", text,
                     entry.counted);
}

}  // namespace tbcoll
