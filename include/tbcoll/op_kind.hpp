// The kinds of call a communicator makes, as every message's signature carries them (transport::Tag::meta).
#pragma once

#include <cstdint>

#include "tbcoll/export.h"

namespace tbcoll {

/// The kinds of call, as every message's signature carries them (Tag::meta).
enum class OpKind : uint8_t {
  kAllReduce = 1,
  kAllGather = 2,
  kBroadcast = 3,
  kBarrier = 4,
  kSendRecv = 5,
  kReduceScatter = 6,
  kReduce = 7,
  kAllToAll = 8,
  kAllToAllv = 9,
  kGather = 10,
  kScatter = 11
};
/// Values from here to kNumOpKinds - 1 are free for collectives registered at run time (a test's, a plug-in's).
constexpr int kFirstRegisteredOpKind = 12;
constexpr int kNumOpKinds = 16;  ///< OpKind values are below this

/// "all_reduce", "all_gather", "broadcast", "barrier", "send/recv", "reduce_scatter", "reduce", "all_to_all",
/// "all_to_allv", "gather", "scatter", a registered collective's name; "unknown".
TBCOLL_API const char* op_kind_name(OpKind kind);

}  // namespace tbcoll
