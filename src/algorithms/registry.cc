// The algorithm table (see registry.h): the rows of src/algorithms/*.cc, which the build lists in
// algorithm_rows.inc, then those registered at run time.
#include "algorithms/registry.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "algorithms/cost.h"
#include "collective_traits.h"
#include "signature.h"
#include "tuner_config.h"

namespace tbcoll::algo {

#define TBCOLL_ALGORITHM_ROW(id) Algorithm tbcoll_algorithm_row_##id();
#include "algorithm_rows.inc"
#undef TBCOLL_ALGORITHM_ROW

namespace {

// Why row cannot join a table holding rows, or "".
std::string refusal(const Algorithm& row, const std::vector<Algorithm>& rows) {
  if (row.name == nullptr || row.name[0] == '\0') return "an algorithm row needs a name";
  if (row.run == nullptr) return fmt::format("algorithm {:?} has no schedule", row.name);
  if (row.cost == nullptr) {
    return fmt::format("algorithm {:?} has no cost function (every row is priced: algorithms/cost.h)", row.name);
  }
  if (row.description == nullptr) return fmt::format("algorithm {:?} has no description", row.name);
  if (traits_of(row.kind) == nullptr) {
    return fmt::format("algorithm {:?}: collective {} has no traits row (register_collective)", row.name,
                       static_cast<int>(row.kind));
  }
  unsigned rows_of_kind = 0;
  for (const Algorithm& existing : rows) {
    if (existing.kind != row.kind) continue;
    ++rows_of_kind;
    if (std::strcmp(existing.name, row.name) == 0) {
      return fmt::format("{} already has an algorithm named {:?}", op_kind_name(row.kind), row.name);
    }
  }
  if (rows_of_kind >= kMaxSchedules) {
    return fmt::format("{} has {} algorithms already, the most a signature can tell apart", op_kind_name(row.kind),
                       rows_of_kind);
  }
  return "";
}

void insert(std::vector<Algorithm>& rows, const Algorithm& row) {
  const std::string why = refusal(row, rows);
  if (!why.empty()) throw InvalidArgument(why);
  rows.push_back(row);
  std::stable_sort(rows.begin(), rows.end(), [](const Algorithm& a, const Algorithm& b) {
    return a.kind != b.kind ? a.kind < b.kind
                            : a.position != b.position ? a.position < b.position : std::strcmp(a.name, b.name) < 0;
  });
}

struct Table {
  std::mutex mutex;
  std::vector<Algorithm> rows;

  Table() {
#define TBCOLL_ALGORITHM_ROW(id) insert(rows, tbcoll_algorithm_row_##id());
#include "algorithm_rows.inc"
#undef TBCOLL_ALGORITHM_ROW
  }
};

Table& table() {
  static Table instance;
  return instance;
}

}  // namespace

ByteRange forced_only(const TunerConfig&, int) { return {0, 0}; }
ByteRange direct_range(const TunerConfig& tuning, int) { return up_to(tuning.direct_max_bytes); }
ByteRange binomial_range(const TunerConfig& tuning, int world_size) {
  return world_size == 2 ? kAllSizes : up_to(tuning.tree_max_bytes);
}
ByteRange by_model(const TunerConfig& tuning, int) { return tuning.use_model ? kAllSizes : ByteRange{0, 0}; }

std::string needs_hosts_with_several_ranks(const CallShape& call) {
  if (call.hosts <= 1) {
    return fmt::format("all {} ranks are on one host (ranks with different TBCOLL_HOST_ID are on different hosts)",
                       call.world_size);
  }
  if (call.hosts >= call.world_size) {
    return fmt::format("each of the {} hosts has one rank, so there is nothing to combine inside a host", call.hosts);
  }
  return "";
}

std::vector<Algorithm> algorithms_for(OpKind kind) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::vector<Algorithm> out;
  for (const Algorithm& row : t.rows) {
    if (row.kind == kind) out.push_back(row);
  }
  return out;
}

void register_algorithm(const Algorithm& row) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  insert(t.rows, row);
}

const char* self_algorithm_name() { return "self"; }

bool parse_collective(const std::string& name, OpKind* kind) {
  const CollectiveTraits* traits = traits_named(name);
  if (traits == nullptr) return false;
  *kind = traits->kind;
  return true;
}

std::vector<OpKind> collectives() {
  std::vector<OpKind> kinds;
  for (const CollectiveTraits& traits : collective_traits()) kinds.push_back(traits.kind);
  return kinds;
}

}  // namespace tbcoll::algo
