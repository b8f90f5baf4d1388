// The algorithm table (see registry.h). Each row's schedule lives in its own file, which draws it and counts
// its cost; the one-line descriptions here are what tbcoll-info prints.
#include "algorithms/registry.h"

#include <mutex>

#include <fmt/format.h>

#include "algorithms/algorithms.h"
#include "algorithms/cost.h"
#include "signature.h"
#include "tuner.h"

namespace tbcoll::algo {
namespace {

ByteRange direct_range(const TunerConfig& tuning, int) { return up_to(tuning.direct_max_bytes); }

// The binomial tree's log2(n) steps beat the chain's pipeline for small messages; with two ranks both are one
// message, and the tree sends it whole.
ByteRange binomial_range(const TunerConfig& tuning, int world_size) {
  return world_size == 2 ? kAllSizes : up_to(tuning.tree_max_bytes);
}

void barrier(Exec& exec, const Args&) { barrier_dissemination(exec); }

std::vector<Algorithm> built_in() {
  return {
      {OpKind::kAllReduce, "direct", "every rank sends its input to every other, each reduces all n in rank order: "
       "1 step, (n-1)S sent per rank", all_reduce_direct, direct_range, nullptr, cost_all_reduce_direct},
      {OpKind::kAllReduce, "ring", "reduce-scatter then all-gather around the ring, chunked and pipelined: 2(n-1) "
       "steps, 2(n-1)/n S sent per rank", all_reduce_ring, nullptr, nullptr, cost_all_reduce_ring},
      {OpKind::kAllGather, "direct", "every rank sends its block to every other: 1 step, (n-1)/n S sent per rank",
       all_gather_direct, direct_range, nullptr, cost_all_gather_direct},
      {OpKind::kAllGather, "ring", "blocks forwarded around the ring, chunked: n-1 steps, (n-1)/n S sent per rank",
       all_gather_ring, nullptr, nullptr, cost_all_gather_ring},
      {OpKind::kReduceScatter, "direct", "block p of every rank sent to rank p, reduced there in rank order: 1 step, "
       "(n-1)/n S sent per rank", reduce_scatter_direct, nullptr, nullptr, cost_reduce_scatter_direct},
      {OpKind::kReduce, "direct", "every rank sends its input to the root, which reduces in rank order: 1 step, the "
       "root receives (n-1)S", reduce_direct, nullptr, nullptr, cost_reduce_direct},
      {OpKind::kBroadcast, "binomial", "binomial tree from the root: ceil(log2 n) steps of S", broadcast_tree,
       binomial_range, nullptr, cost_broadcast_binomial},
      {OpKind::kBroadcast, "chain", "root -> next -> ... chunked and pipelined: n-2 + S/chunk chunk times, every "
       "link carries S once", broadcast_chain, nullptr, nullptr, cost_broadcast_chain},
      {OpKind::kBarrier, "dissemination", "round k: token to r+2^k, from r-2^k: ceil(log2 n) steps, no payload",
       barrier, nullptr, nullptr, cost_barrier_dissemination},
  };
}

struct Table {
  std::mutex mutex;
  std::vector<Algorithm> rows = built_in();
};

Table& table() {
  static Table instance;
  return instance;
}

}  // namespace

std::vector<Algorithm> algorithms_for(OpKind kind) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::vector<Algorithm> out;
  for (const Algorithm& row : t.rows) {
    if (row.kind == kind) out.push_back(row);
  }
  return out;
}

std::vector<Algorithm> all_algorithms() {
  std::vector<Algorithm> out;
  for (OpKind kind : collectives()) {
    for (const Algorithm& row : algorithms_for(kind)) out.push_back(row);
  }
  return out;
}

void register_algorithm(const Algorithm& row) {
  if (row.run == nullptr || row.name == nullptr || row.name[0] == '\0') {
    throw InvalidArgument("an algorithm row needs a name and a schedule");
  }
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  unsigned rows_of_kind = 0;
  for (const Algorithm& existing : t.rows) {
    if (existing.kind != row.kind) continue;
    ++rows_of_kind;
    if (std::string(existing.name) == row.name) {
      throw InvalidArgument(fmt::format("{} already has an algorithm named {:?}", op_kind_name(row.kind), row.name));
    }
  }
  if (rows_of_kind >= kMaxSchedules) {
    throw InvalidArgument(fmt::format("{} has {} algorithms already, the most a signature can tell apart",
                                      op_kind_name(row.kind), rows_of_kind));
  }
  t.rows.push_back(row);
}

const char* self_algorithm_name() { return "self"; }

bool parse_collective(const std::string& name, OpKind* kind) {
  static const std::pair<const char*, OpKind> names[] = {
      {"all_reduce", OpKind::kAllReduce},         {"allreduce", OpKind::kAllReduce},
      {"all_gather", OpKind::kAllGather},         {"allgather", OpKind::kAllGather},
      {"reduce_scatter", OpKind::kReduceScatter}, {"reducescatter", OpKind::kReduceScatter},
      {"reduce", OpKind::kReduce},                {"broadcast", OpKind::kBroadcast},
      {"bcast", OpKind::kBroadcast},              {"barrier", OpKind::kBarrier}};
  for (const auto& [text, value] : names) {
    if (name == text) {
      *kind = value;
      return true;
    }
  }
  return false;
}

const std::vector<OpKind>& collectives() {
  static const std::vector<OpKind> kinds = {OpKind::kAllReduce, OpKind::kAllGather, OpKind::kReduceScatter,
                                            OpKind::kReduce,    OpKind::kBroadcast, OpKind::kBarrier};
  return kinds;
}

}  // namespace tbcoll::algo
