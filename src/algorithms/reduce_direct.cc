// reduce by direct exchange: every rank sends its input to the root, which reduces the n inputs in rank order.
//
//   r1 --S--> root <--S-- r2        1 step; the root receives (n-1) inputs: fine for the small world sizes of a
//              ^                    host or a Mac cluster (a reduce-scatter + gather schedule would spread the
//              S from r3            load for large n).
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"
#include "reduce/reduce.h"

namespace tbcoll::algo {

void reduce_direct(Exec& exec, const Args& args) {
  const int n = exec.size();
  const int r = exec.rank();
  const size_t bytes = args.count * args.elem_size;
  if (r != args.root) {
    exec.wait(exec.isend(args.root, args.send, bytes));
    return;
  }
  auto* slots = static_cast<uint8_t*>(exec.scratch().get(static_cast<size_t>(n) * bytes));
  std::vector<const uint8_t*> inputs(n);
  for (int p = 0; p < n; ++p) inputs[p] = slots + static_cast<size_t>(p) * bytes;
  if (args.send == args.recv) {
    std::memcpy(slots + static_cast<size_t>(r) * bytes, args.send, bytes);
  } else {
    inputs[r] = static_cast<const uint8_t*>(args.send);
  }
  for (int k = 1; k < n; ++k) {
    int p = (r + k) % n;
    exec.irecv(p, slots + static_cast<size_t>(p) * bytes, bytes);
  }
  exec.wait_all();
  reduce::reduce_ranks(args.recv, n, args.count, args.dtype, args.op, reduce::kernel(args.dtype, args.op),
                       [&](int p) { return inputs[p]; });
}

TBCOLL_ALGORITHM(reduce_direct) {
  Algorithm row;
  row.kind = OpKind::kReduce;
  row.name = "direct";
  row.description =
      "every rank sends its input to the root, which reduces in rank order: 1 step, the root "
      "receives (n-1)S";
  row.run = reduce_direct;
  row.cost = cost_reduce_direct;
  row.position = 100;
  return row;
}

}  // namespace tbcoll::algo
