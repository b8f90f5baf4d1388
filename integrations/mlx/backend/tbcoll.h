// tbcoll as an MLX distributed backend: mx.distributed.init(backend="tbcoll"), or "any" in a process that
// tbcoll-run started. See integrations/mlx/README.md in the tbcoll project.
#pragma once

#include "mlx/distributed/distributed.h"

namespace mlx::core::distributed::tbcoll {

using GroupImpl = mlx::core::distributed::detail::GroupImpl;

/// True when MLX was built with the backend (not whether a job is set up).
bool is_available();
/// The world group over a tbcoll communicator built from the environment tbcoll-run sets (TBCOLL_RANK,
/// TBCOLL_WORLD_SIZE, TBCOLL_ROOT, ...). Without TBCOLL_RANK: nullptr, or with strict an error saying how to
/// launch. A communicator that cannot be built (a peer that never comes) throws whatever strict says.
std::shared_ptr<GroupImpl> init(bool strict = false);

}  // namespace mlx::core::distributed::tbcoll
