#include "tools/doctor/verdict.h"

#include <algorithm>

#include <fmt/format.h>

namespace tbcoll::doctor {
namespace {

using flight::Call;
using flight::CallKind;
using flight::Dump;
using flight::Outcome;
using flight::State;

// A stall shorter than this in a job whose ranks are all alive is a snapshot taken between two ranks' entries.
constexpr double kMinStallSeconds = 1.0;
// A link whose ranks waited less than this in all is not worth naming, whatever its ratio.
constexpr uint64_t kMinNamedWaitUs = 1000;

std::string ranks_word(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

int world_size(const std::vector<Dump>& dumps) {
  int size = 0;
  for (const Dump& dump : dumps) size = std::max(size, dump.size);
  return size;
}

// The rank's record of collective number seq, if its ring still holds it.
const Call* collective_record(const Dump& dump, uint64_t seq) {
  for (auto it = dump.records.rbegin(); it != dump.records.rend(); ++it) {
    if (it->kind == CallKind::kCollective && it->seq == seq) return &*it;
  }
  return nullptr;
}

const char* outcome_word(Outcome outcome) {
  switch (outcome) {
    case Outcome::kRunning:
      return "still running";
    case Outcome::kOk:
      return "completed";
    case Outcome::kFailed:
      return "failed";
    case Outcome::kEmpty:
      break;
  }
  return "not started";
}

std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

std::vector<std::string> missing_files(const std::vector<Dump>& dumps) {
  std::set<int> present;
  for (const Dump& dump : dumps) present.insert(dump.rank);
  std::vector<int> missing;
  for (int r = 0; r < world_size(dumps); ++r) {
    if (present.count(r) == 0) missing.push_back(r);
  }
  if (missing.empty()) return {};
  if (missing.size() == 1) {
    return {
        fmt::format("no flight file of rank {} (it never created this communicator, wrote elsewhere, or its "
                    "host's files were not collected)",
                    missing[0])};
  }
  return {
      fmt::format("no flight files of ranks {} (they never created this communicator, wrote elsewhere, or their "
                  "hosts' files were not collected)",
                  rank_list(missing))};
}

std::vector<std::string> size_mismatch(const std::vector<Dump>& dumps) {
  std::map<int, std::vector<int>> ranks_by_size;
  for (const Dump& dump : dumps) ranks_by_size[dump.size].push_back(dump.rank);
  if (ranks_by_size.size() < 2) return {};
  std::string line = "the files disagree on the communicator's size:";
  const char* separator = " ";
  for (const auto& [size, ranks] : ranks_by_size) {
    line += fmt::format("{}{} say{} {}", separator, ranks_word(ranks), ranks.size() == 1 ? "s" : "", size);
    separator = "; ";
  }
  return {line};
}

// The first collective number at which the ranks' records differ in name, count, dtype, op or root.
std::vector<std::string> disagreement(const std::vector<Dump>& dumps) {
  std::map<uint64_t, std::map<std::string, std::vector<int>>> calls;  // seq -> signature -> ranks
  for (const Dump& dump : dumps) {
    for (const Call& call : dump.records) {
      if (call.kind == CallKind::kCollective) calls[call.seq][call.describe()].push_back(dump.rank);
    }
  }
  for (const auto& [seq, sides] : calls) {
    if (sides.size() < 2) continue;
    std::vector<std::pair<std::vector<int>, std::string>> ordered;  // by their lowest rank
    for (const auto& [signature, ranks] : sides) ordered.emplace_back(ranks, signature);
    std::sort(ordered.begin(), ordered.end());
    std::string line = fmt::format("ranks disagree at #{}:", seq);
    const char* separator = " ";
    for (const auto& [ranks, signature] : ordered) {
      line += fmt::format("{}{} called {}", separator, ranks_word(ranks), signature);
      separator = "; ";
    }
    return {line};
  }
  return {};
}

// "#1531, completed", "send(count=4, f32, peer=1) after #1531, still running"; and the rank's state unless live.
std::string last_call(const Dump& dump) {
  std::string text;
  if (dump.records.empty()) {
    text = dump.entered == 0 ? "none recorded" : fmt::format("#{}", dump.entered);
  } else {
    const Call& last = dump.records.back();
    text = last.kind == CallKind::kCollective ? fmt::format("#{}", last.seq)
                                              : fmt::format("{} after #{}", last.describe(), last.seq);
    text += fmt::format(", {}", outcome_word(last.outcome));
  }
  switch (dump.state) {
    case State::kFinished:
      return text + "; it destroyed the communicator";
    case State::kFailed:
      return text + "; it failed";
    case State::kAborted:
      return text + "; it was aborted";
    case State::kLive:
      break;
  }
  return text;
}

std::string seconds_range(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  const double low = seconds.front(), high = seconds.back();
  if (high - low <= 0.1 + 0.05 * high) return fmt::format("{:.1f} s", high);
  return fmt::format("{:.1f} to {:.1f} s", low, high);
}

// The highest collective any rank entered, when some ranks never entered it.
std::vector<std::string> never_entered(const std::vector<Dump>& dumps, const std::set<int>& ended) {
  uint64_t stalled = 0;
  for (const Dump& dump : dumps) stalled = std::max(stalled, dump.entered);
  std::vector<int> laggards, waiters, finished;
  const Call* call = nullptr;
  std::vector<double> waited;  // seconds, per waiter whose ring still holds the call
  bool all_live = true;
  for (const Dump& dump : dumps) {
    all_live = all_live && dump.state == State::kLive && ended.count(dump.rank) == 0;
    if (dump.entered < stalled) {
      laggards.push_back(dump.rank);
      continue;
    }
    const Call* record = collective_record(dump, stalled);
    if (call == nullptr) call = record;
    if (dump.completed >= stalled) {
      finished.push_back(dump.rank);
      continue;
    }
    waiters.push_back(dump.rank);
    if (record != nullptr) {
      const int64_t end_us = record->end_us > 0 ? record->end_us : dump.updated_us;
      waited.push_back(static_cast<double>(std::max<int64_t>(0, end_us - record->start_us)) / 1e6);
    }
  }
  if (stalled == 0 || laggards.empty()) return {};
  const double longest = waited.empty() ? 0 : *std::max_element(waited.begin(), waited.end());
  if (all_live && longest < kMinStallSeconds) return {};
  std::string last_calls;
  for (int r : laggards) {
    const auto it = std::find_if(dumps.begin(), dumps.end(), [r](const Dump& dump) { return dump.rank == r; });
    if (!last_calls.empty()) last_calls += "; ";
    last_calls += (laggards.size() == 1 ? "its" : fmt::format("rank {}'s", r)) + " last call: " + last_call(*it);
  }
  std::string line = fmt::format("{} never entered {} #{} ({})", ranks_word(laggards),
                                 call != nullptr ? call->describe() : "collective", stalled, last_calls);
  if (!waiters.empty() && !waited.empty()) {
    line += fmt::format("; {} waited {} for it", ranks_word(waiters), seconds_range(waited));
  } else if (!waiters.empty()) {
    line += fmt::format("; {} entered it and did not complete it", ranks_word(waiters));
  }
  if (!finished.empty()) line += fmt::format("; {} completed it", ranks_word(finished));
  return {line};
}

// Where a failed rank's wait leads: following the peers its timed-out waits were on, through ranks that failed the
// same way, to a rank that did not fail (its file still says live: stopped, hung, or gone without a word) or wrote
// no file; -1 when the chain ends in a rank that failed for a reason of its own (or loops).
int end_of_waits(const std::map<int, const Dump*>& by_rank, int rank) {
  std::set<int> seen;
  int at = rank;
  while (seen.insert(at).second) {
    const auto it = by_rank.find(at);
    if (it == by_rank.end()) return at;  // no file: the chain ends at it
    const Dump& dump = *it->second;
    if (dump.state == State::kLive) return at;
    if (dump.state != State::kFailed || dump.stalled_on < 0) return -1;
    at = dump.stalled_on;
  }
  return -1;
}

// What the rank the waits lead to was doing: inside a call it never finished, or before one it never entered.
// waited_in: the call the waiters were in, as one of them recorded it (may be null).
std::string where_it_stopped(const Dump* dump, uint64_t seq, const Call* waited_in) {
  if (dump == nullptr) return "wrote no flight file";
  if (dump->completed < dump->entered) {
    const Call* call = collective_record(*dump, dump->entered);
    return fmt::format("stopped inside {} #{} and never finished it", call != nullptr ? call->describe() : "collective",
                       dump->entered);
  }
  const uint64_t never = std::max(seq, dump->entered + 1);
  const std::string what = waited_in != nullptr && waited_in->seq == never ? waited_in->describe() : "collective";
  return fmt::format("never entered {} #{} (its last call: {})", what, never, last_call(*dump));
}

// The rank whose peers' timed-out waits all lead to it, and how long they waited: "rank 2 stopped inside
// all_reduce(...) #1532 and never finished it; ranks 0, 3 waited 30.0 s for it, rank 1 for them".
std::vector<std::string> waits_lead_to(const std::vector<Dump>& dumps) {
  std::map<int, const Dump*> by_rank;
  for (const Dump& dump : dumps) by_rank[dump.rank] = &dump;
  std::map<int, std::vector<const Dump*>> waiting_on;  // the rank a chain ends at -> the failed ranks that lead there
  for (const Dump& dump : dumps) {
    if (dump.state != State::kFailed || dump.stalled_on < 0) continue;
    const int end = end_of_waits(by_rank, dump.rank);
    if (end >= 0) waiting_on[end].push_back(&dump);
  }
  std::vector<std::string> lines;
  for (const auto& [culprit, waiters] : waiting_on) {
    std::vector<int> direct, through;
    std::vector<double> waited;
    uint64_t seq = 0;
    const Call* waited_in = nullptr;
    for (const Dump* waiter : waiters) {
      (waiter->stalled_on == culprit ? direct : through).push_back(waiter->rank);
      const Call* call = collective_record(*waiter, waiter->entered);
      if (waiter->entered > seq) {
        seq = waiter->entered;
        waited_in = call;
      }
      if (call != nullptr && call->end_us > 0) waited.push_back(static_cast<double>(call->end_us - call->start_us) / 1e6);
    }
    const auto it = by_rank.find(culprit);
    std::string line = fmt::format("rank {} {}; {} waited {}for it", culprit,
                                   where_it_stopped(it == by_rank.end() ? nullptr : it->second, seq, waited_in),
                                   ranks_word(direct), waited.empty() ? "" : seconds_range(waited) + " ");
    if (!through.empty()) line += fmt::format(", {} for them", ranks_word(through));
    lines.push_back(line);
  }
  return lines;
}

std::vector<std::string> failures(const std::vector<Dump>& dumps) {
  std::vector<std::string> lines;
  for (const Dump& dump : dumps) {
    if (dump.state != State::kFailed && dump.state != State::kAborted) continue;
    const std::string stalled =
        dump.stalled_on >= 0 ? fmt::format(" (its wait on rank {} passed the deadline)", dump.stalled_on) : "";
    lines.push_back(fmt::format("rank {} {}{}: {}", dump.rank, dump.state == State::kFailed ? "failed" : "was aborted",
                                stalled, dump.reason.empty() ? "no reason written" : one_line(dump.reason)));
  }
  return lines;
}

std::vector<std::string> silent_deaths(const std::vector<Dump>& dumps, const std::set<int>& ended) {
  std::vector<int> ranks;
  for (const Dump& dump : dumps) {
    if (dump.state == State::kLive && ended.count(dump.rank) != 0) ranks.push_back(dump.rank);
  }
  if (ranks.empty()) return {};
  return {fmt::format("{} ended without closing {} file{} ({} process{} gone: killed, or crashed)", ranks_word(ranks),
                      ranks.size() == 1 ? "its" : "their", ranks.size() == 1 ? "" : "s",
                      ranks.size() == 1 ? "its" : "their", ranks.size() == 1 ? " is" : "es are")};
}

// Over the calls every rank recorded: the rank that started last, where the starts are further apart than a tick.
std::vector<std::string> late_arrivals(const std::vector<Dump>& dumps) {
  if (dumps.size() < 2) return {};
  std::map<uint64_t, std::vector<std::pair<int64_t, int>>> starts;  // seq -> (start, rank)
  for (const Dump& dump : dumps) {
    for (const Call& call : dump.records) {
      if (call.kind == CallKind::kCollective) starts[call.seq].emplace_back(call.start_us, dump.rank);
    }
  }
  size_t recorded_by_all = 0;
  std::map<int, std::pair<size_t, int64_t>> last;  // rank -> (calls it was last at, sum of its lateness)
  for (auto& [seq, entries] : starts) {
    if (entries.size() != dumps.size()) continue;
    ++recorded_by_all;
    std::sort(entries.begin(), entries.end());
    const int64_t spread = entries.back().first - entries.front().first;
    if (spread <= kClockTickUs || entries[entries.size() - 2].first == entries.back().first) continue;
    auto& [calls, lateness] = last[entries.back().second];
    ++calls;
    lateness += spread;
  }
  std::vector<std::string> lines;
  for (const auto& [rank, figures] : last) {
    if (figures.first * 2 <= recorded_by_all) continue;
    lines.push_back(
        fmt::format("rank {} arrived last at {} of the {} calls all ranks recorded ({:.1f} ms after the "
                    "first on average)",
                    rank, figures.first, recorded_by_all,
                    static_cast<double>(figures.second) / 1e3 / static_cast<double>(figures.first)));
  }
  return lines;
}

std::string all_good(const std::vector<Dump>& dumps) {
  uint64_t completed = dumps.front().completed;
  bool all_finished = true;
  for (const Dump& dump : dumps) {
    completed = std::min(completed, dump.completed);
    all_finished = all_finished && dump.state == State::kFinished;
  }
  return fmt::format("all {} ranks completed {} collective{}{}; nothing looks wrong", dumps.size(), completed,
                     completed == 1 ? "" : "s", all_finished ? " and destroyed the communicator" : "");
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

}  // namespace

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

std::map<uint64_t, std::vector<Dump>> by_communicator(std::vector<Dump> dumps) {
  std::map<uint64_t, std::map<int, Dump>> grouped;
  for (Dump& dump : dumps) {
    auto& ranks = grouped[dump.comm_id];
    auto it = ranks.find(dump.rank);
    if (it == ranks.end() || it->second.updated_us < dump.updated_us) ranks[dump.rank] = std::move(dump);
  }
  std::map<uint64_t, std::vector<Dump>> out;
  for (auto& [comm_id, ranks] : grouped) {
    for (auto& [rank, dump] : ranks) out[comm_id].push_back(std::move(dump));
  }
  return out;
}

std::vector<LinkFigures> links(const std::vector<Dump>& dumps) {
  std::map<int, const Dump*> by_rank;
  for (const Dump& dump : dumps) by_rank[dump.rank] = &dump;
  std::vector<LinkFigures> out;
  for (const auto& [a, first] : by_rank) {
    for (const auto& [b, second] : by_rank) {
      if (b <= a || first->peers.size() <= static_cast<size_t>(b) || second->peers.size() <= static_cast<size_t>(a)) {
        continue;
      }
      const flight::Peer& a_on_b = first->peers[static_cast<size_t>(b)];
      const flight::Peer& b_on_a = second->peers[static_cast<size_t>(a)];
      // A slow wire makes both ends wait on each other; a rank that comes late to its calls makes its peers wait on
      // it, not itself on them: the link's figure is what both ends paid, twice the smaller end's.
      out.push_back({a, b, a_on_b.sent_bytes + b_on_a.sent_bytes, 2 * std::min(a_on_b.wait_us, b_on_a.wait_us)});
    }
  }
  return out;
}

std::vector<std::string> slow_links(const std::vector<Dump>& dumps) {
  std::vector<LinkFigures> moved;
  for (const LinkFigures& link : links(dumps)) {
    if (link.bytes > 0) moved.push_back(link);
  }
  if (moved.size() < kMinLinksToCompare) return {};
  std::sort(moved.begin(), moved.end(),
            [](const LinkFigures& x, const LinkFigures& y) { return x.us_per_mib() > y.us_per_mib(); });
  // The slow links are the few above the first gap of kSlowLinkFactor between neighbours in that order (within
  // the slower half): a slow link's lateness spreads to the links around it, a little, never by that much.
  size_t slow = 0;
  for (size_t k = 0; k < moved.size() / 2 && slow == 0; ++k) {
    if (moved[k].us_per_mib() >= kSlowLinkFactor * moved[k + 1].us_per_mib()) slow = k + 1;
  }
  std::vector<std::string> lines;
  for (size_t i = 0; i < slow; ++i) {
    std::vector<double> others;
    for (size_t j = slow; j < moved.size(); ++j) others.push_back(moved[j].us_per_mib());
    const double value = moved[i].us_per_mib(), typical = median(others);
    if (moved[i].wait_us < kMinNamedWaitUs) continue;
    const std::string how = typical > 0 ? fmt::format("{:.0f}x slower", value / typical) : "far slower";
    lines.push_back(fmt::format("link {}<->{} is {} than the others: {:.0f} us waited per MiB vs {:.0f} us (median "
                                "of the other links)",
                                moved[i].a, moved[i].b, how, value, typical));
  }
  return lines;
}

std::vector<std::string> verdict(const std::vector<Dump>& dumps, const std::set<int>& ended) {
  if (dumps.empty()) return {"no flight files"};
  std::vector<Dump> sorted = dumps;
  std::sort(sorted.begin(), sorted.end(), [](const Dump& a, const Dump& b) { return a.rank < b.rank; });
  std::vector<std::string> lines;
  auto add = [&lines](std::vector<std::string> found) {
    for (std::string& line : found) lines.push_back(std::move(line));
  };
  add(missing_files(sorted));
  add(size_mismatch(sorted));
  add(disagreement(sorted));
  std::vector<std::string> culprits = waits_lead_to(sorted);
  add(culprits.empty() ? never_entered(sorted, ended) : std::move(culprits));
  add(failures(sorted));
  add(silent_deaths(sorted, ended));
  add(slow_links(sorted));
  if (lines.empty()) lines.push_back(all_good(sorted));
  add(late_arrivals(sorted));
  return lines;
}

}  // namespace tbcoll::doctor
