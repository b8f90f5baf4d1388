// The floors through the system's verbs library: floors.h's entry point, for tbcoll-perf.
#include "tools/rdma_diag/floors.h"

#include "tools/rdma_diag/raw_link.h"
#include "transports/ibverbs/verbs.h"

namespace tbcoll::ibverbs {

Floors system_floors(const FloorOptions& options, const PeerExchange& exchange) {
  std::string why_not;
  const VerbsApi* verbs = system_verbs(&why_not);
  return measure_floors(verbs, why_not, options, exchange);
}

}  // namespace tbcoll::ibverbs
