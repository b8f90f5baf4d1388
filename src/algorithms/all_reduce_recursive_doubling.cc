// Recursive-doubling all-reduce (small messages): in round k every rank swaps its whole partial result with
// the rank 2^k away (virtual ranks, r XOR 2^k) and combines the two.
//
//   round 0:  0 <-> 1   2 <-> 3   4 <-> 5   6 <-> 7      after round k every rank holds the reduction of its
//   round 1:  0 <-> 2   1 <-> 3   4 <-> 6   5 <-> 7      block of 2^(k+1) ranks; log2 n rounds in all
//   round 2:  0 <-> 4   1 <-> 5   2 <-> 6   3 <-> 7
//
// A non-power-of-two world is folded first (topology.h, Fold): with p the largest power of two <= n and
// extra = n - p, ranks 2i and 2i+1 (i < extra) pair up; 2i sends its input to 2i+1 and sits out, and gets the
// result from it at the end.
//
//   n = 6:  0 -> 1   2 -> 3      fold (extra = 2)
//           1 3 4 5              recursive doubling among p = 4 (virtual ranks 0 1 2 3)
//           1 -> 0   3 -> 2      unfold
//
// Cost: log2 p rounds (+ 2 when n is not a power of two), each S sent and received per rank; log2 p * S
// reduced. The operand of the lower block always comes first (a op b, a from lower ranks), so both partners
// compute the same expression and every rank ends with bitwise identical results, whatever the op (max of -0
// and +0, NaN payloads).
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"
#include "algorithms/topology.h"
#include "reduce/reduce.h"

namespace tbcoll::algo {

void all_reduce_recursive_doubling(Exec& exec, const Args& args) {
  const int r = exec.rank();
  const Fold fold(exec.size());
  const size_t bytes = args.count * args.elem_size;
  const auto* src = static_cast<const uint8_t*>(args.send);
  auto* dst = static_cast<uint8_t*>(args.recv);
  const reduce::Kernel kernel = reduce::kernel(args.dtype, args.op);
  auto* other = static_cast<uint8_t*>(exec.scratch().get(bytes));

  if (r < 2 * fold.extra && r % 2 == 0) {  // folded out: hand the input over, get the result back
    exec.isend(r + 1, src, bytes);
    exec.wait(exec.irecv(r + 1, dst, bytes));
    exec.wait_all();
    return;
  }
  if (r < 2 * fold.extra) {
    exec.wait(exec.irecv(r - 1, other, bytes));
    kernel(dst, other, src, args.count);
  } else if (dst != src) {
    std::memcpy(dst, src, bytes);
  }
  const int v = fold.virtual_rank(r);
  for (int mask = 1; mask < fold.p; mask <<= 1) {
    const int partner = v ^ mask;
    const int peer = fold.real_rank(partner);
    const size_t got = exec.irecv(peer, other, bytes);
    const size_t sent = exec.isend(peer, dst, bytes);
    exec.wait(got);
    exec.wait(sent);  // dst is overwritten next
    if (partner < v) {
      kernel(dst, other, dst, args.count);
    } else {
      kernel(dst, dst, other, args.count);
    }
  }
  if (args.op == ReduceOp::kAvg) reduce::divide(dst, dst, args.count, args.dtype, exec.size());
  if (r < 2 * fold.extra) exec.isend(r - 1, dst, bytes);
  exec.wait_all();
}

TBCOLL_ALGORITHM(all_reduce_recursive_doubling) {
  Algorithm row;
  row.kind = OpKind::kAllReduce;
  row.name = "recursive_doubling";
  row.description =
      "swap and combine with r XOR 2^k (non-powers of two folded): log2 n steps (+2), S sent "
      "per step";
  row.run = all_reduce_recursive_doubling;
  row.cost = cost_all_reduce_recursive_doubling;
  row.position = 30;
  row.auto_range = by_model;
  return row;
}

}  // namespace tbcoll::algo
