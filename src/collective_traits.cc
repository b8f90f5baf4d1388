// The collective descriptor's rows (collective_traits.h).
#include "collective_traits.h"

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "tbcoll/error.hpp"

namespace tbcoll {
namespace {

double all_reduce_factor(int n) { return 2.0 * (n - 1) / n; }
double gather_factor(int n) { return static_cast<double>(n - 1) / n; }
double one(int) { return 1.0; }

CollectiveTraits& add(std::vector<CollectiveTraits>& rows, OpKind kind, const char* name, const char* short_name) {
  CollectiveTraits row;
  row.kind = kind;
  row.name = name;
  row.short_name = short_name;
  row.bus_factor = gather_factor;
  rows.push_back(row);
  return rows.back();
}

// all_reduce, all_gather, reduce_scatter, reduce, broadcast, barrier.
void add_the_nccl_collectives(std::vector<CollectiveTraits>& rows) {
  {
    CollectiveTraits& t = add(rows, OpKind::kAllReduce, "all_reduce", "allreduce");
    t.reduces = true;
    t.bus_factor = all_reduce_factor;
  }
  {
    CollectiveTraits& t = add(rows, OpKind::kAllGather, "all_gather", "allgather");
    t.recv_per_rank = true;
    t.in_place = InPlace::kSendInRecv;
    t.in_place_rule = "send == recv + rank * count";
  }
  {
    CollectiveTraits& t = add(rows, OpKind::kReduceScatter, "reduce_scatter", "reducescatter");
    t.reduces = true;
    t.send_per_rank = true;
    t.in_place = InPlace::kRecvInSend;
    t.in_place_rule = "recv == send + rank * count";
  }
  {
    CollectiveTraits& t = add(rows, OpKind::kReduce, "reduce", "");
    t.reduces = t.rooted = true;
    t.writes_recv = Ranks::kRootOnly;
    t.bus_factor = one;
  }
  {
    CollectiveTraits& t = add(rows, OpKind::kBroadcast, "broadcast", "bcast");
    t.rooted = true;
    t.reads_send = Ranks::kRootOnly;
    t.bus_factor = one;
  }
  {
    CollectiveTraits& t = add(rows, OpKind::kBarrier, "barrier", "");
    t.takes_count = false;
    t.bus_factor = one;
  }
}

// The exchanges: the model prices their rows, the size ranges choose (posting every block at once against pairwise
// steps is a question of the receivers' buffers, which the model does not see).
void add_the_exchanges(std::vector<CollectiveTraits>& rows) {
  {
    CollectiveTraits& t = add(rows, OpKind::kAllToAll, "all_to_all", "alltoall");
    t.send_per_rank = t.recv_per_rank = true;
    t.model_decides = false;
    t.tells_refusals = false;
  }
  {
    CollectiveTraits& t = add(rows, OpKind::kAllToAllv, "all_to_allv", "alltoallv");
    t.takes_count = false;
    t.send_per_rank = t.recv_per_rank = true;
    t.model_decides = false;
  }
  {
    CollectiveTraits& t = add(rows, OpKind::kGather, "gather", "");
    t.rooted = true;
    t.recv_per_rank = true;
    t.writes_recv = Ranks::kRootOnly;
    t.in_place = InPlace::kSendInRecv;
    t.in_place_at_root = true;
    t.in_place_rule = "send == recv + root * count, at the root";
    t.model_decides = false;
    t.tells_refusals = false;
  }
  {
    CollectiveTraits& t = add(rows, OpKind::kScatter, "scatter", "");
    t.rooted = true;
    t.send_per_rank = true;
    t.reads_send = Ranks::kRootOnly;
    t.in_place = InPlace::kRecvInSend;
    t.in_place_at_root = true;
    t.in_place_rule = "recv == send + root * count, at the root";
    t.model_decides = false;
    t.tells_refusals = false;
  }
}

std::vector<CollectiveTraits> built_in() {
  std::vector<CollectiveTraits> rows;
  add_the_nccl_collectives(rows);
  add_the_exchanges(rows);
  return rows;
}

// Rows by kind, at stable addresses: calls hold a row's address, registration fills a free slot.
struct Table {
  std::mutex mutex;  // registration only; lookups read `present`
  std::array<CollectiveTraits, kNumOpKinds> rows{};
  std::array<std::atomic<bool>, kNumOpKinds> present{};
  std::vector<OpKind> order;  // built-in rows, then registered ones (under mutex)

  Table() {
    for (const CollectiveTraits& row : built_in()) {
      rows[static_cast<size_t>(row.kind)] = row;
      present[static_cast<size_t>(row.kind)].store(true);
      order.push_back(row.kind);
    }
  }
};

Table& table() {
  static Table instance;
  return instance;
}

bool named(const CollectiveTraits& row, const std::string& name) {
  return name == row.name || (row.short_name[0] != '\0' && name == row.short_name);
}

}  // namespace

std::vector<CollectiveTraits> collective_traits() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::vector<CollectiveTraits> out;
  for (OpKind kind : t.order) out.push_back(t.rows[static_cast<size_t>(kind)]);
  return out;
}

const CollectiveTraits* traits_of(OpKind kind) {
  const size_t slot = static_cast<size_t>(kind);
  if (slot >= static_cast<size_t>(kNumOpKinds)) return nullptr;
  Table& t = table();
  return t.present[slot].load(std::memory_order_acquire) ? &t.rows[slot] : nullptr;
}

const CollectiveTraits* traits_named(const std::string& name) {
  Table& t = table();
  for (size_t slot = 0; slot < t.rows.size(); ++slot) {
    if (t.present[slot].load(std::memory_order_acquire) && named(t.rows[slot], name)) return &t.rows[slot];
  }
  return nullptr;
}

void register_collective(const CollectiveTraits& row) {
  const int kind = static_cast<int>(row.kind);
  if (kind < kFirstRegisteredOpKind || kind >= kNumOpKinds) {
    throw InvalidArgument(fmt::format("register_collective: kind {} is not one of the free values {}..{}", kind,
                                      kFirstRegisteredOpKind, kNumOpKinds - 1));
  }
  if (row.name == nullptr || row.name[0] == '\0' || row.short_name == nullptr || row.in_place_rule == nullptr ||
      row.bus_factor == nullptr) {
    throw InvalidArgument("register_collective: a row needs a name, a short name (may be \"\"), an in-place rule "
                          "and a bus factor");
  }
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (t.present[static_cast<size_t>(kind)].load()) {
    throw InvalidArgument(fmt::format("register_collective: kind {} is {} already", kind, t.rows[kind].name));
  }
  for (OpKind other : t.order) {
    const CollectiveTraits& existing = t.rows[static_cast<size_t>(other)];
    if (named(existing, row.name) || (row.short_name[0] != '\0' && named(existing, row.short_name))) {
      throw InvalidArgument(fmt::format("register_collective: a collective named {:?} exists", row.name));
    }
  }
  t.rows[static_cast<size_t>(kind)] = row;
  t.present[static_cast<size_t>(kind)].store(true, std::memory_order_release);
  t.order.push_back(row.kind);
}

const char* op_kind_name(OpKind kind) {
  if (kind == OpKind::kSendRecv) return "send/recv";
  const CollectiveTraits* row = traits_of(kind);
  return row != nullptr ? row->name : "unknown";
}

}  // namespace tbcoll
