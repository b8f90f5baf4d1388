// The binomial tree of gather and scatter (gather_binomial.cc draws it), in ranks relative to the root:
// v = (r - root) mod n. Rank v heads the subtree [v, v + lowbit(v)) (the root: every rank), cut at n; its children
// are v + 2^j for 2^j < lowbit(v), its parent v - lowbit(v). The blocks of a subtree travel together, in relative
// order.
#pragma once

#include <algorithm>
#include <vector>

#include "algorithms/chunking.h"
#include "algorithms/exec.h"

namespace tbcoll::algo {

struct Subtree {
  int first;  ///< relative rank heading it
  int size;   ///< ranks in it
};

// Rank v's own subtree, and its children's (largest first).
struct Tree {
  int n, v, root;
  int span() const {  // lowbit(v); for the root the power of two that covers every rank
    if (v != 0) return v & -v;
    int span = 1;
    while (span < n) span <<= 1;
    return span;
  }
  int size() const { return std::min(span(), n - v); }
  int parent() const { return actual(v - (v & -v)); }
  int actual(int relative) const { return (relative + root) % n; }
  std::vector<Subtree> children() const {
    std::vector<Subtree> out;
    for (int mask = span() / 2; mask >= 1; mask >>= 1) {
      if (v + mask < n) out.push_back({v + mask, std::min(mask, n - v - mask)});
    }
    return out;
  }
};

inline Tree tree_of(const Exec& exec, int root) { return {exec.size(), mod(exec.rank() - root, exec.size()), root}; }

}  // namespace tbcoll::algo
