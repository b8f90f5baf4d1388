/* For programs that keep NCCL's `#include <nccl.h>`: compile them with -I<prefix>/include/tbcoll/nccl (beside
 * -I<prefix>/include) and link -ltbcoll. The API is tbcoll/nccl.h's. */
#ifndef TBCOLL_NCCL_NCCL_H_
#define TBCOLL_NCCL_NCCL_H_
#include "tbcoll/nccl.h"
#endif
