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

}  // namespace tbcoll::ibverbs
