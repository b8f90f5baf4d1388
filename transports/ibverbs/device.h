// The ibverbs device: RDMA through libibverbs (Thunderbolt on macOS, RoCE/InfiniBand/Soft-RoCE on Linux), with
// the verbs from the system's library or, in tests, from a fake fabric.
#pragma once

#include <memory>
#include <string>

#include "tbcoll/transport.hpp"
#include "transports/ibverbs/verbs.h"

namespace tbcoll::ibverbs {

/// A device named `name` that reaches peers through `verbs` (which must outlive it). Contexts fail with IoError
/// (and the communicator moves on to the next transport) where no device is usable. same_process_only: for a
/// fabric inside this process (the tests' fake).
std::shared_ptr<transport::Device> make_device(const VerbsApi* verbs, std::string name, bool same_process_only = false);

/// The queue pairs the transport allows itself per process on `device` with TBCOLL_IB_MAX_QPS=auto: the device's
/// max_qp (ibv_query_device), at most 10 on Apple's rdma_enN (the 11th fails with EBUSY whatever it reports); where
/// it reports none (max_qp 0), 10 there and 0 (no limit of ours) elsewhere. What tbcoll-rdma-check probes up to.
int auto_queue_pair_budget(const std::string& device, int max_qp);

}  // namespace tbcoll::ibverbs
