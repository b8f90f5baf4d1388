// gather, binomial tree (small messages); scatter_binomial.cc runs the same tree (binomial_tree.h) the other
// way. Ranks relative to the root: v = (r - root) mod n. Rank v heads the subtree [v, v + lowbit(v)) (the root:
// every rank), cut at n; its children are v + 2^j for 2^j < lowbit(v), its parent v - lowbit(v). The blocks of a
// subtree travel together, in relative order:
//
//   gather (n = 8), leaves first:         step 0: 1->0  3->2  5->4  7->6    (one block each)
//                                         step 1: 2->0  6->4                (two blocks each)
//                                         step 2: 4->0                      (four blocks)
//
// Cost: ceil(log2 n) steps instead of the direct schedule's n-1 messages at the root; the root receives (n-1)/n
// S as there, but an inner rank v also forwards its subtree's lowbit(v)-1 blocks (S/2 in all at the first
// level): worth it while latency dominates. Inner ranks stage their subtree in scratch; the root's blocks are in
// rank order, so a subtree that wraps past rank n-1 goes through scratch there too.
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/binomial_tree.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"

namespace tbcoll::algo {

void gather_binomial(Exec& exec, const Args& args) {
  const Tree t = tree_of(exec, args.root);
  const size_t block = args.count * args.elem_size;
  if (t.v != 0) {
    if (t.size() == 1) {
      exec.wait(exec.isend(t.parent(), args.send, block));
      return;
    }
    auto* staged = static_cast<uint8_t*>(exec.scratch().get(static_cast<size_t>(t.size()) * block));
    std::memcpy(staged, args.send, block);
    for (const Subtree& child : t.children()) {
      exec.irecv(t.actual(child.first), staged + static_cast<size_t>(child.first - t.v) * block,
                 static_cast<size_t>(child.size) * block);
    }
    exec.wait_all();
    exec.wait(exec.isend(t.parent(), staged, static_cast<size_t>(t.size()) * block));
    return;
  }
  // The root: each child's blocks straight into place, unless they wrap past rank n-1 (one child at most).
  auto* recv = static_cast<uint8_t*>(args.recv);
  uint8_t* wrapped = nullptr;
  Subtree wrapped_child{0, 0};
  for (const Subtree& child : t.children()) {
    const int start = t.actual(child.first);
    const size_t bytes = static_cast<size_t>(child.size) * block;
    if (start + child.size <= t.n) {
      exec.irecv(start, recv + static_cast<size_t>(start) * block, bytes);
    } else {
      wrapped = static_cast<uint8_t*>(exec.scratch().get(bytes));
      wrapped_child = child;
      exec.irecv(start, wrapped, bytes);
    }
  }
  uint8_t* own = recv + static_cast<size_t>(args.root) * block;
  if (args.send != own) std::memcpy(own, args.send, block);  // else in place
  exec.wait_all();
  if (wrapped != nullptr) {
    const int start = t.actual(wrapped_child.first);
    const size_t head = static_cast<size_t>(t.n - start) * block;  // ranks start..n-1, then 0..
    std::memcpy(recv + static_cast<size_t>(start) * block, wrapped, head);
    std::memcpy(recv, wrapped + head, static_cast<size_t>(wrapped_child.size) * block - head);
  }
}

TBCOLL_ALGORITHM(gather_binomial) {
  Algorithm row;
  row.kind = OpKind::kGather;
  row.name = "binomial";
  row.description =
      "binomial tree to the root, subtrees' blocks forwarded: ceil(log2 n) steps, the root "
      "receives (n-1)/n S";
  row.run = gather_binomial;
  row.cost = cost_gather_binomial;
  row.position = 10;
  row.auto_range = binomial_range;
  return row;
}

}  // namespace tbcoll::algo
