// scatter, binomial tree (small messages): gather_binomial.cc's tree (binomial_tree.h) the other way, the root
// sending the far subtree first (4, then 2, then 1 at n = 8), each inner rank forwarding its children's blocks.
// Cost: ceil(log2 n) steps; the root sends (n-1)/n S; inner ranks stage their subtree in scratch; the root's
// blocks are in rank order, so a subtree that wraps past rank n-1 is packed in scratch there.
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/binomial_tree.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"

namespace tbcoll::algo {

void scatter_binomial(Exec& exec, const Args& args) {
  const Tree t = tree_of(exec, args.root);
  const size_t block = args.count * args.elem_size;
  if (t.v != 0) {
    if (t.size() == 1) {
      exec.wait(exec.irecv(t.parent(), args.recv, block));
      return;
    }
    auto* staged = static_cast<uint8_t*>(exec.scratch().get(static_cast<size_t>(t.size()) * block));
    exec.wait(exec.irecv(t.parent(), staged, static_cast<size_t>(t.size()) * block));
    std::memcpy(args.recv, staged, block);
    for (const Subtree& child : t.children()) {
      exec.isend(t.actual(child.first), staged + static_cast<size_t>(child.first - t.v) * block,
                 static_cast<size_t>(child.size) * block);
    }
    exec.wait_all();
    return;
  }
  const auto* send = static_cast<const uint8_t*>(args.send);
  for (const Subtree& child : t.children()) {
    const int start = t.actual(child.first);
    const size_t bytes = static_cast<size_t>(child.size) * block;
    if (start + child.size <= t.n) {
      exec.isend(start, send + static_cast<size_t>(start) * block, bytes);
    } else {  // ranks start..n-1, then 0..: packed in scratch (one child at most)
      auto* packed = static_cast<uint8_t*>(exec.scratch().get(bytes));
      const size_t head = static_cast<size_t>(t.n - start) * block;
      std::memcpy(packed, send + static_cast<size_t>(start) * block, head);
      std::memcpy(packed + head, send, bytes - head);
      exec.isend(start, packed, bytes);
    }
  }
  const uint8_t* own = send + static_cast<size_t>(args.root) * block;
  if (args.recv != own) std::memcpy(args.recv, own, block);  // else in place
  exec.wait_all();
}

TBCOLL_ALGORITHM(scatter_binomial) {
  Algorithm row;
  row.kind = OpKind::kScatter;
  row.name = "binomial";
  row.description =
      "binomial tree from the root, subtrees' blocks forwarded: ceil(log2 n) steps, the root "
      "sends (n-1)/n S";
  row.run = scatter_binomial;
  row.cost = cost_gather_binomial;
  row.position = 10;
  row.auto_range = binomial_range;
  return row;
}

}  // namespace tbcoll::algo
