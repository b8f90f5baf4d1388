// Pure rank maths of the tree, recursive-doubling and hierarchical schedules (unit-tested on their own):
// the two complementary binary trees of the double binary tree, the fold of a non-power-of-two world onto a
// power of two, and ranks grouped by host.
#pragma once

#include <cstddef>
#include <vector>

namespace tbcoll::algo {

/// One rank's links in a tree: its parent (-1 at the root) and up to two children (-1 where none).
struct TreeLinks {
  int parent = -1;
  int child[2] = {-1, -1};
};

/// NCCL's in-order binary tree over ranks 0..n-1: rank r's parent flips r's lowest set bit and sets the next one
/// up (or just flips it, when that is past n); the root is 0, whose one child is the largest power of two below n.
///
///   n = 8:        0            depth ceil(log2 n); every rank but 0 is in-order between its two subtrees
///                 |
///                 4
///               /   \         (child 0 below r, child 1 above)
///              2     6
///             / \   / \       leaves: the odd ranks
///            1   3 5   7
inline TreeLinks binary_tree(int n, int r) {
  TreeLinks links;
  int bit = 1;
  while (bit < n && (bit & r) == 0) bit <<= 1;
  if (r == 0) {
    if (n > 1) links.child[1] = bit >> 1;
    return links;
  }
  int up = (r ^ bit) | (bit << 1);
  if (up >= n) up = r ^ bit;
  links.parent = up;
  int low = bit >> 1;
  if (low > 0) links.child[0] = r - low;
  while (low > 0 && r + low >= n) low >>= 1;
  if (low > 0) links.child[1] = r + low;
  return links;
}

/// Tree which (0 or 1) of the double binary tree: tree 0 is binary_tree; tree 1 is its mirror image (r -> n-1-r)
/// when n is even and its shift by one (r -> r+1) when n is odd, so the leaves of one tree (half the ranks) are
/// the inner nodes of the other and no rank forwards the whole message twice.
inline TreeLinks double_tree(int n, int r, int which) {
  if (which == 0) return binary_tree(n, r);
  auto map = [&](int x, bool back) {
    if (x < 0) return -1;
    if (n % 2 == 0) return n - 1 - x;
    return back ? (x + 1) % n : (x - 1 + n) % n;
  };
  const TreeLinks inner = binary_tree(n, map(r, false));
  TreeLinks links;
  links.parent = map(inner.parent, true);
  links.child[0] = map(inner.child[0], true);
  links.child[1] = map(inner.child[1], true);
  return links;
}

/// Depth of the binary tree over n ranks (the most links from the root to a leaf).
inline int tree_depth(int n) {
  int depth = 0;
  while ((1 << depth) < n) ++depth;
  return depth;
}

/// A world of n ranks folded onto p = the largest power of two <= n (MPICH's recursive doubling and
/// Rabenseifner): the first 2 * extra ranks pair up, (0,1), (2,3), ...; the even rank of a pair hands its data
/// to the odd one and sits out; the others are renumbered 0..p-1 in rank order, so a virtual rank's data is
/// always that of a run of consecutive real ranks.
struct Fold {
  int p = 1;
  int extra = 0;
  explicit Fold(int n) {
    while (p * 2 <= n) p *= 2;
    extra = n - p;
  }
  /// The virtual rank of real rank r, or -1 if it sits out.
  int virtual_rank(int r) const {
    if (r >= 2 * extra) return r - extra;
    return r % 2 == 1 ? r / 2 : -1;
  }
  /// The real rank of virtual rank v.
  int real_rank(int v) const { return v < extra ? 2 * v + 1 : v + extra; }
};

/// The ranks of each host, in rank order; hosts in the order of host_of's numbers.
inline std::vector<std::vector<int>> ranks_by_host(const std::vector<int>& host_of) {
  std::vector<std::vector<int>> hosts;
  for (int r = 0; r < static_cast<int>(host_of.size()); ++r) {
    const auto h = static_cast<size_t>(host_of[static_cast<size_t>(r)]);
    if (hosts.size() <= h) hosts.resize(h + 1);
    hosts[h].push_back(r);
  }
  return hosts;
}

}  // namespace tbcoll::algo
