// Recursive-doubling all-gather: in round k every rank swaps everything it has gathered so far with the rank 2^k
// away (virtual ranks, v XOR 2^k); the gathered blocks double each round.
//
//   round 0:  0 <-> 1   2 <-> 3      B0 B1 | B2 B3          after round k each rank holds the blocks of its run
//   round 1:  0 <-> 2   1 <-> 3      B0 B1 B2 B3            of 2^(k+1) ranks; log2 n rounds
//
// A non-power-of-two world is folded as in recursive doubling (topology.h, Fold): rank 2i sends its block to 2i+1
// (i < extra) before, and receives everything from it after. A virtual rank stands for a run of consecutive real
// ranks, so what a rank holds is always one contiguous range of recv and each round is one message.
//
// Cost with S the gathered bytes: log2 p rounds (+ 2 when n is not a power of two), each rank receiving
// (p-1)/p S in all (plus S across a fold): the ring's bytes with log latency.
#include <algorithm>
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"
#include "algorithms/topology.h"

namespace tbcoll::algo {

void all_gather_recursive_doubling(Exec& exec, const Args& args) {
  const int n = exec.size();
  const int r = exec.rank();
  const Fold fold(n);
  const size_t block = args.count * args.elem_size;
  auto* dst = static_cast<uint8_t*>(args.recv);
  auto at = [&](int real) { return dst + static_cast<size_t>(real) * block; };
  if (args.send != at(r)) std::memcpy(at(r), args.send, block);

  if (r < 2 * fold.extra && r % 2 == 0) {  // folded out
    exec.wait(exec.isend(r + 1, at(r), block));
    exec.wait(exec.irecv(r + 1, dst, static_cast<size_t>(n) * block));
    return;
  }
  if (r < 2 * fold.extra) exec.wait(exec.irecv(r - 1, at(r - 1), block));
  // The first real rank of virtual rank v's run (v = p: one past the last).
  auto first_real = [&](int v) { return v < fold.extra ? 2 * v : v + fold.extra; };
  const int v = fold.virtual_rank(r);
  int lo = v, hi = v + 1;  // virtual ranks whose blocks this rank holds
  for (int mask = 1; mask < fold.p; mask <<= 1) {
    const int peer = fold.real_rank(v ^ mask);
    const bool lower = (v & mask) == 0;
    const int their_lo = lower ? hi : lo - mask, their_hi = lower ? hi + mask : lo;
    const size_t got = exec.irecv(peer, at(first_real(their_lo)),
                                  static_cast<size_t>(first_real(their_hi) - first_real(their_lo)) * block);
    exec.isend(peer, at(first_real(lo)), static_cast<size_t>(first_real(hi) - first_real(lo)) * block);
    exec.wait(got);
    lo = std::min(lo, their_lo);
    hi = std::max(hi, their_hi);
  }
  if (r < 2 * fold.extra) exec.isend(r - 1, dst, static_cast<size_t>(n) * block);
  exec.wait_all();
}

TBCOLL_ALGORITHM(all_gather_recursive_doubling) {
  Algorithm row;
  row.kind = OpKind::kAllGather;
  row.name = "recursive_doubling";
  row.description =
      "swap everything gathered so far with r XOR 2^k (non-powers of two folded): log2 n steps "
      "(+2), (n-1)/n S received per rank";
  row.run = all_gather_recursive_doubling;
  row.cost = cost_all_gather_recursive_doubling;
  row.position = 30;
  row.auto_range = by_model;
  return row;
}

}  // namespace tbcoll::algo
