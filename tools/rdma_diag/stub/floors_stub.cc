// Built instead of the RDMA diagnostics when TBCOLL_WITH_IBVERBS=OFF (or no infiniband/verbs.h to build against):
// tbcoll-perf's raw verbs floors answer "not measured".
#include "tools/rdma_diag/floors.h"

namespace tbcoll::ibverbs {
Floors system_floors(const FloorOptions&, const PeerExchange& exchange) {
  Floors floors;
  const std::string why = "this build has no ibverbs transport (configure with libibverbs-dev installed)";
  exchange("ERR " + why);  // stay in step with a peer whose build has it
  floors.why_not = why;
  return floors;
}
}  // namespace tbcoll::ibverbs
