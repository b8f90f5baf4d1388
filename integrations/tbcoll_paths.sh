# Sourced by the integrations' build scripts (with $project set to tbcoll's source tree): sets include and lib to
# tbcoll's headers and library, from TBCOLL_PREFIX (an install) or the source tree and TBCOLL_BUILD (default
# build/), and exits naming what is missing.
if [ -n "${TBCOLL_PREFIX:-}" ]; then
  include=$TBCOLL_PREFIX/include
  lib=$TBCOLL_PREFIX/lib
else
  include=$project/include
  lib=$(cd "${TBCOLL_BUILD:-$project/build}" && pwd)
fi
[ -f "$include/tbcoll/tbcoll.hpp" ] || { echo "build.sh: no tbcoll headers in $include" >&2; exit 2; }
ls "$lib"/libtbcoll.so* > /dev/null 2>&1 || { echo "build.sh: no libtbcoll.so in $lib (build tbcoll first)" >&2; exit 2; }
