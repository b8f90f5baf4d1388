// MLX built without tbcoll (integrations/mlx/build.sh names it): the backend says it is not available.
#include "mlx/distributed/tbcoll/tbcoll.h"

namespace mlx::core::distributed::tbcoll {

bool is_available() { return false; }

std::shared_ptr<GroupImpl> init(bool strict /* = false */) {
  if (strict) {
    throw std::runtime_error(
        "[tbcoll] MLX was built without the tbcoll backend (build it with tbcoll's integrations/mlx/build.sh).");
  }
  return nullptr;
}

}  // namespace mlx::core::distributed::tbcoll
