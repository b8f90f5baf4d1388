#include "tuner.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "collective_traits.h"
#include "common/env.h"
#include "tbcoll/error.hpp"

namespace tbcoll {
namespace {

size_t slot(OpKind kind) { return static_cast<size_t>(kind); }

// "direct, ring" and, for fast paths, "oneshot (shm)": the names a collective has in this build.
std::string names_of(OpKind kind, const std::vector<KnownFastPath>& known) {
  std::vector<std::string> names;
  for (const KnownFastPath& fast : known) {
    if (fast.algorithm.kind == kind) names.push_back(fmt::format("{} ({} fast path)", fast.algorithm.name, fast.device));
  }
  for (const algo::Algorithm& row : algo::algorithms_for(kind)) names.push_back(row.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

bool has_name(OpKind kind, const std::string& name, const std::vector<KnownFastPath>& known) {
  for (const algo::Algorithm& row : algo::algorithms_for(kind)) {
    if (name == row.name) return true;
  }
  for (const KnownFastPath& fast : known) {
    if (fast.algorithm.kind == kind && fast.algorithm.name == name) return true;
  }
  return false;
}

// Whether choice can run call: Choice::refusal() without building the reason (choose() runs on every call).
bool can_run(const Choice& choice, const algo::CallShape& call) {
  if (call.bytes > choice.max_bytes || (choice.dtypes >> static_cast<int>(call.dtype) & 1u) == 0) return false;
  return choice.cannot_run == nullptr || choice.cannot_run(call).empty();
}

// Calls fn(choice, predicted seconds) for every point-to-point row the model may pick for call: runnable, not a
// fast path, not forced-only (rows with an empty default range, all_to_allv's direct; their costs still show in
// --explain).
template <typename Fn>
void each_priced(const std::vector<Choice>& menu, const algo::CallShape& call, const algo::CostParams& costs, Fn&& fn) {
  for (const Choice& choice : menu) {
    if (choice.fast_path_index >= 0 || choice.auto_range.max == 0 || !can_run(choice, call)) continue;
    fn(choice, choice.cost(call, costs));
  }
}

std::string every_name(const std::vector<KnownFastPath>& known) {
  std::string out;
  for (OpKind kind : algo::collectives()) {
    out += fmt::format("{}{}: {}", out.empty() ? "" : "; ", op_kind_name(kind), names_of(kind, known));
  }
  return out;
}

}  // namespace

TunerConfig TunerConfig::from_env(const env::Settings& settings) {
  TunerConfig config;
  const std::string spin = settings.get("TBCOLL_SPIN_US");
  if (!spin.empty() && spin != "auto") {
    config.spin = std::chrono::microseconds(std::max<long long>(0, settings.get_int("TBCOLL_SPIN_US")));
  }
  const std::string wait = settings.get("TBCOLL_WAIT");
  if (wait == "auto" || wait.empty()) {
    config.wait_mode = 0;
  } else if (wait == "spin") {
    config.wait_mode = 1;
  } else if (wait == "block") {
    config.wait_mode = 2;
  } else {
    throw InvalidArgument(fmt::format("[env] TBCOLL_WAIT={}: expected auto, spin or block", wait));
  }
  // Ring schedules keep 4 chunks of scratch in flight: a chunk size beyond this would ask for absurd scratch
  // (and, near 2^62, wrap its size).
  constexpr long long kMinChunk = 4096, kMaxChunk = 64ll << 20;
  const long long chunk = settings.get_int("TBCOLL_CHUNK_BYTES");
  if (chunk < kMinChunk || chunk > kMaxChunk) {
    throw InvalidArgument(fmt::format("[env] TBCOLL_CHUNK_BYTES={} is outside [{}, {}]", chunk, kMinChunk, kMaxChunk));
  }
  config.chunk_bytes = static_cast<size_t>(chunk);
  config.direct_max_bytes = static_cast<size_t>(std::max<long long>(0, settings.get_int("TBCOLL_DIRECT_MAX_BYTES")));
  config.tree_max_bytes = static_cast<size_t>(std::max<long long>(0, settings.get_int("TBCOLL_TREE_MAX_BYTES")));
  const std::string mode = settings.get("TBCOLL_TUNER");
  if (mode == "model" || mode == "measure") {
    config.use_model = true;
    config.measure = mode == "measure";
  } else if (mode == "ranges") {
    config.use_model = false;
  } else if (mode == "auto") {
    // A direct-exchange size set by hand asks for the ranges it sets.
    config.use_model = !settings.is_set("TBCOLL_DIRECT_MAX_BYTES");
  } else {
    throw InvalidArgument(fmt::format("[env] TBCOLL_TUNER={:?} is not auto, model, measure or ranges", mode));
  }
  const long long trials = settings.get_int("TBCOLL_TUNE_TRIALS");
  if (trials < 1 || trials > 100) {
    throw InvalidArgument(fmt::format("[env] TBCOLL_TUNE_TRIALS={} is outside [1, 100]", trials));
  }
  config.measure_trials = static_cast<int>(trials);
  return config;
}

ForcedAlgorithms parse_forced(const std::string& spec, const std::vector<KnownFastPath>& known) {
  ForcedAlgorithms forced;
  std::array<bool, kNumOpKinds> named_explicitly{};
  size_t start = 0;
  while (start < spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string::npos) comma = spec.size();
    const std::string item = spec.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    if (colon == std::string::npos) {  // a bare name: every collective that has it, unless named on its own
      bool any = false;
      for (OpKind kind : algo::collectives()) {
        if (!has_name(kind, item, known)) continue;
        any = true;
        if (!named_explicitly[slot(kind)]) forced[slot(kind)] = item;
      }
      if (!any) throw InvalidArgument(fmt::format("unknown algorithm {:?} (TBCOLL_ALGO; {})", item, every_name(known)));
      continue;
    }
    const std::string collective = item.substr(0, colon), name = item.substr(colon + 1);
    OpKind kind{};
    if (!algo::parse_collective(collective, &kind)) {
      std::vector<std::string> names;
      for (const CollectiveTraits& traits : collective_traits()) names.push_back(traits.name);
      throw InvalidArgument(fmt::format("unknown collective {:?} in TBCOLL_ALGO {:?} ({})", collective, spec,
                                        fmt::join(names, ", ")));
    }
    if (named_explicitly[slot(kind)]) {
      throw InvalidArgument(fmt::format("TBCOLL_ALGO {:?} names {} twice", spec, op_kind_name(kind)));
    }
    if (!has_name(kind, name, known)) {
      throw InvalidArgument(fmt::format("{} has no algorithm {:?} (TBCOLL_ALGO; it has {})", op_kind_name(kind), name,
                                        names_of(kind, known)));
    }
    named_explicitly[slot(kind)] = true;
    forced[slot(kind)] = name;
  }
  return forced;
}

std::string Choice::refusal(const algo::CallShape& call) const {
  if (call.bytes > max_bytes) return fmt::format("it takes at most {} B (this call has {} B)", max_bytes, call.bytes);
  if ((dtypes >> static_cast<int>(call.dtype) & 1u) == 0) return fmt::format("it does not take {}", to_string(call.dtype));
  return cannot_run != nullptr ? cannot_run(call) : std::string();
}

Tuner::Tuner(const TunerConfig& config, int world_size, const ForcedAlgorithms& forced,
             const std::vector<transport::FastPathAlgorithm>& fast_path, std::vector<KnownFastPath> known,
             algo::CostParams costs)
    : config_(config), costs_(std::move(costs)), forced_names_(forced), known_(std::move(known)) {
  costs_.chunk_bytes = config_.chunk_bytes;
  for (size_t i = 0; i < fast_path.size(); ++i) {
    const transport::FastPathAlgorithm& offered = fast_path[i];
    Choice choice;
    choice.name = offered.name;
    choice.fast_path_index = static_cast<int>(i);
    choice.auto_range = {offered.auto_min_bytes, offered.auto_max_bytes};
    choice.max_bytes = offered.max_bytes;
    choice.dtypes = offered.dtypes;
    menu_[slot(offered.kind)].push_back(choice);
  }
  for (OpKind kind : algo::collectives()) {
    unsigned schedule = 0;
    for (const algo::Algorithm& row : algo::algorithms_for(kind)) {
      Choice choice;
      choice.name = row.name;
      choice.run = row.run;
      choice.schedule = ++schedule;
      choice.auto_range = row.auto_range != nullptr ? row.auto_range(config, world_size) : algo::kAllSizes;
      choice.cannot_run = row.cannot_run;
      choice.cost = row.cost;
      menu_[slot(kind)].push_back(choice);
    }
  }
  for (size_t k = 0; k < menu_.size(); ++k) {
    const CollectiveTraits* traits = traits_of(static_cast<OpKind>(k));
    model_decides_[k] = config_.use_model && traits != nullptr && traits->model_decides;
    forced_[k] = -1;
    if (forced_names_[k].empty()) continue;
    forced_[k] = -2;
    for (size_t i = 0; i < menu_[k].size(); ++i) {
      if (menu_[k][i].name == forced_names_[k]) forced_[k] = static_cast<int>(i);
    }
  }
}

const Choice& Tuner::choose(const algo::CallShape& call) const {
  const std::vector<Choice>& menu = menu_[slot(call.kind)];
  const int forced = forced_[slot(call.kind)];
  if (forced >= 0) {
    const Choice& choice = menu[static_cast<size_t>(forced)];
    if (!can_run(choice, call)) refuse(call, choice.refusal(call));
    return choice;
  }
  if (forced == -2) {
    std::string device = "a transport";
    for (const KnownFastPath& fast : known_) {
      if (fast.algorithm.kind == call.kind && fast.algorithm.name == forced_names_[slot(call.kind)]) {
        device = "the " + fast.device + " transport";
      }
    }
    refuse(call, fmt::format("it is a fast path of {}, which this communicator does not use between every pair of "
                             "ranks (or link emulation is on)",
                             device));
  }
  for (const Choice& choice : menu) {  // fast paths within their own ranges first
    if (choice.fast_path_index >= 0 && choice.auto_range.holds(call.bytes) && can_run(choice, call)) return choice;
  }
  if (model_decides(call.kind)) {
    const Choice* cheapest = nullptr;
    double cheapest_cost = 0;
    each_priced(menu, call, costs_, [&](const Choice& choice, double cost) {
      if (cheapest == nullptr || cost < cheapest_cost) {
        cheapest = &choice;
        cheapest_cost = cost;
      }
    });
    if (cheapest != nullptr) {
      // Rows the model cannot tell apart (ring and direct all_gather on two ranks are the same exchange): the
      // size ranges decide between them.
      for (const Choice& choice : menu) {
        if (choice.fast_path_index >= 0 || !choice.auto_range.holds(call.bytes) || !can_run(choice, call)) continue;
        if (choice.cost(call, costs_) <= cheapest_cost * (1 + 1e-9)) return choice;
      }
      return *cheapest;
    }
  }
  for (const Choice& choice : menu) {
    if (choice.auto_range.holds(call.bytes) && can_run(choice, call)) return choice;
  }
  // Unreachable with the built-in rows (each collective's last takes every size); a registered row may narrow it.
  for (const Choice& choice : menu) {
    if (choice.refusal(call).empty()) return choice;
  }
  throw Error(tbcollInternalError, fmt::format("no algorithm can run {} of {} B", op_kind_name(call.kind), call.bytes));
}

void Tuner::refuse(const algo::CallShape& call, const std::string& why) const {
  std::vector<std::string> can;
  for (const Choice& choice : menu_[slot(call.kind)]) {
    if (choice.refusal(call).empty()) can.push_back(choice.name);
  }
  throw InvalidArgument(fmt::format("algorithm {:?} cannot run this call: {}; algorithms that can: {}",
                                    forced_names_[slot(call.kind)], why, fmt::join(can, ", ")));
}

std::vector<Estimate> Tuner::estimates(const algo::CallShape& call) const {
  std::vector<Estimate> out;
  for (const Choice& choice : menu_[slot(call.kind)]) {
    Estimate estimate;
    estimate.name = choice.name;
    estimate.refusal = choice.refusal(call);
    estimate.fast_path = choice.fast_path_index >= 0;
    if (choice.cost != nullptr) estimate.seconds = choice.cost(call, costs_);
    out.push_back(estimate);
  }
  return out;
}

std::vector<const Choice*> Tuner::shortlist(const algo::CallShape& call, double factor, size_t most) const {
  if (!model_decides(call.kind) || forced_[slot(call.kind)] != -1) return {};
  std::vector<std::pair<double, const Choice*>> priced;
  each_priced(menu_[slot(call.kind)], call, costs_,
              [&](const Choice& choice, double cost) { priced.push_back({cost, &choice}); });
  if (priced.empty()) return {};
  std::stable_sort(priced.begin(), priced.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<const Choice*> out;
  for (const auto& [cost, choice] : priced) {
    if (out.size() < most && cost <= factor * priced.front().first) out.push_back(choice);
  }
  return out;
}

std::string Tuner::schedule_name(OpKind kind, unsigned schedule) const {
  if (schedule == 0) return "none";
  if (slot(kind) >= menu_.size()) return "?";
  for (const Choice& choice : menu_[slot(kind)]) {
    if (choice.schedule == schedule) return choice.name;
  }
  return "?";
}

}  // namespace tbcoll
