// The collective descriptor: one row of plain data per collective, which the one call path (collectives.cc), the
// one asynchronous path (async.cc), the argument checks (call_checks.cc), the tuner, the tools and the
// benchmarks read instead of knowing each collective by name. Adding a collective is one row (built in here, or
// registered by a test or a plug-in with register_collective) and its algorithms (algorithms/registry.h).
//
// Buffers, for count elements and n ranks: a side is either one block of count elements or n blocks (per rank);
// the in-place rule says which pointer equality means "in place" (any other overlap is refused).
//
//   collective      send   recv   reads send  writes recv  in place                 busbw factor
//   all_reduce      1      1      every rank  every rank   send == recv             2(n-1)/n
//   all_gather      1      n      every rank  every rank   send == recv + rank      (n-1)/n
//   reduce_scatter  n      1      every rank  every rank   recv == send + rank      (n-1)/n
//   reduce          1      1      every rank  root         send == recv             1
//   broadcast       1      1      root        every rank   send == recv             1
//   all_to_all      n      n      every rank  every rank   send == recv             (n-1)/n
//   gather          1      n      every rank  root         send == recv + root      (n-1)/n
//   scatter         n      1      root        every rank   recv == send + root      (n-1)/n
//   barrier, all_to_allv: no count (all_to_allv's counts are per peer: its own checks, collectives_exchange.cc)
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tbcoll/op_kind.hpp"

namespace tbcoll {

/// Which ranks touch a buffer.
enum class Ranks : unsigned char { kEvery, kRootOnly };

/// When the send and recv pointers mean "in place".
enum class InPlace : unsigned char {
  kSamePointer,  ///< send == recv
  kSendInRecv,   ///< send == recv + block (rank's or root's, InPlaceBlock) * count
  kRecvInSend,   ///< recv == send + block * count
};

struct CollectiveTraits {
  OpKind kind = OpKind::kAllReduce;
  const char* name = "";        ///< "all_reduce": errors, TBCOLL_ALGO, tbcoll-perf -c, tbcoll-info
  const char* short_name = "";  ///< "allreduce" (NCCL's and nccl-tests' spelling), also accepted; "" if none
  bool reduces = false;         ///< takes a reduction op
  bool rooted = false;          ///< takes a root
  /// Takes buffers and a count; false: barrier (nothing but a tag) and all_to_allv (per-peer counts).
  bool takes_count = true;
  bool send_per_rank = false;   ///< send holds n blocks of count elements (else one)
  bool recv_per_rank = false;   ///< recv holds n blocks
  Ranks reads_send = Ranks::kEvery;
  Ranks writes_recv = Ranks::kEvery;
  InPlace in_place = InPlace::kSamePointer;
  bool in_place_at_root = false;  ///< the block of the in-place rule is the root's (else this rank's)
  const char* in_place_rule = "send == recv";  ///< the rule as error messages say it
  /// The cost model picks among the collective's rows (their costs); false: their size ranges decide (where the
  /// model does not tell the schedules apart well, or the ranks' sizes differ).
  bool model_decides = true;
  /// A rank that refuses its arguments uses up the call's number and tells its peers (Notices::kRefused), so
  /// those waiting in the call fail at once with its reason. false: the exchanges, where ranks that only send
  /// (gather's, scatter's root) would finish the call before they could hear: a refusal there uses up nothing,
  /// and ranks that all refuse stay in step.
  bool tells_refusals = true;
  /// nccl-tests' bus bandwidth factor for n ranks: busbw = algbw * factor.
  double (*bus_factor)(int n) = nullptr;

  /// The bytes the tuner chooses by (CallShape::bytes): count's bytes, times n where a side is per rank.
  size_t shape_blocks(int world_size) const {
    return send_per_rank || recv_per_rank ? static_cast<size_t>(world_size) : 1;
  }
};

/// Every collective, built-in rows then registered ones, in the order tools list them.
std::vector<CollectiveTraits> collective_traits();
/// The row of kind; null if there is none (send/recv, an unknown value).
const CollectiveTraits* traits_of(OpKind kind);
/// The row named name or short_name ("all_reduce", "allreduce", "bcast"...); null if none.
const CollectiveTraits* traits_named(const std::string& name);
/// Adds a collective (a test's, a plug-in's). Its kind must be one of the values OpKind leaves free
/// (kFirstRegisteredOpKind .. kNumOpKinds - 1), unused, and its names new. Throws InvalidArgument otherwise.
/// Thread-safe; communicators created afterwards can run it.
void register_collective(const CollectiveTraits& traits);

}  // namespace tbcoll
