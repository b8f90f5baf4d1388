// Signatures: what a message says of the call it belongs to (layout in signature.h).
#include "signature.h"

#include <fmt/format.h>

namespace tbcoll {

std::string describe_meta(uint64_t meta) {
  const OpKind kind = kind_of(meta);
  auto dtype = static_cast<DataType>((meta >> 48) & 0xff);
  auto op = static_cast<ReduceOp>((meta >> 40) & 0xf);
  unsigned root = static_cast<unsigned>((meta >> 32) & 0xff);
  unsigned long long count = meta & 0xffffffffu;
  switch (kind) {
    case OpKind::kAllReduce:
    case OpKind::kReduceScatter:
      return fmt::format("{}(count={}, {}, {})", op_kind_name(kind), count, to_string(dtype), to_string(op));
    case OpKind::kReduce:
      return fmt::format("reduce(count={}, {}, {}, root={})", count, to_string(dtype), to_string(op), root);
    case OpKind::kBroadcast: return fmt::format("broadcast(count={}, {}, root={})", count, to_string(dtype), root);
    case OpKind::kBarrier: return "barrier()";
    case OpKind::kAllGather:
    case OpKind::kAllToAll:
    case OpKind::kSendRecv: return fmt::format("{}(count={}, {})", op_kind_name(kind), count, to_string(dtype));
    case OpKind::kAllToAllv: return fmt::format("all_to_allv({})", to_string(dtype));  // counts are per peer
    case OpKind::kGather:
    case OpKind::kScatter:
      return fmt::format("{}(count={}, {}, root={})", op_kind_name(kind), count, to_string(dtype), root);
  }
  return fmt::format("unknown operation (signature {:#x})", meta);
}

namespace transport {

bool same_call(uint64_t meta_a, uint64_t meta_b) { return ((meta_a ^ meta_b) & ~kScheduleMask) == 0; }

std::string describe_signature(uint64_t meta) { return describe_meta(meta); }

}  // namespace transport
}  // namespace tbcoll
