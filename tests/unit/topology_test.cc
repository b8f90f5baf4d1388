// The rank maths of the tree, recursive-doubling and hierarchical schedules (algorithms/topology.h).
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "algorithms/topology.h"

namespace tbcoll {
namespace {

// Depth of r in a tree given by links (-1 if r does not reach a root within n steps: a cycle).
int depth_of(const std::vector<algo::TreeLinks>& links, int r) {
  int depth = 0;
  for (; links[static_cast<size_t>(r)].parent >= 0; ++depth) {
    if (depth > static_cast<int>(links.size())) return -1;
    r = links[static_cast<size_t>(r)].parent;
  }
  return depth;
}

TEST(DoubleBinaryTree, BothTreesSpanEveryRankWithConsistentLinksAndLogDepth) {
  for (int n = 1; n <= 64; ++n) {
    std::vector<int> inner_in(static_cast<size_t>(n), 0);
    for (int which = 0; which < 2; ++which) {
      std::vector<algo::TreeLinks> links;
      for (int r = 0; r < n; ++r) links.push_back(algo::double_tree(n, r, which));
      int roots = 0;
      for (int r = 0; r < n; ++r) {
        const algo::TreeLinks& mine = links[static_cast<size_t>(r)];
        if (mine.parent < 0) ++roots;
        if (mine.parent >= 0) {
          ASSERT_LT(mine.parent, n);
          const algo::TreeLinks& up = links[static_cast<size_t>(mine.parent)];
          EXPECT_TRUE(up.child[0] == r || up.child[1] == r) << "n=" << n << " tree " << which << " rank " << r;
        }
        int children = 0;
        for (int child : mine.child) {
          if (child < 0) continue;
          ++children;
          ASSERT_LT(child, n);
          EXPECT_EQ(links[static_cast<size_t>(child)].parent, r) << "n=" << n << " tree " << which;
        }
        if (children > 0) inner_in[static_cast<size_t>(r)]++;
        const int depth = depth_of(links, r);
        EXPECT_GE(depth, 0) << "n=" << n << " tree " << which << " rank " << r << " is on a cycle";
        EXPECT_LE(depth, algo::tree_depth(n)) << "n=" << n << " tree " << which << " rank " << r;
      }
      EXPECT_EQ(roots, 1) << "n=" << n << " tree " << which;
    }
    // Complementary: no rank forwards in both trees when n is even (NCCL's mirror), and at most one when odd.
    int inner_in_both = 0;
    for (int count : inner_in) inner_in_both += count == 2;
    EXPECT_LE(inner_in_both, n % 2 == 0 ? 0 : 1) << "n=" << n;
  }
  // The picture in topology.h.
  EXPECT_EQ(algo::binary_tree(8, 0).child[1], 4);
  EXPECT_EQ(algo::binary_tree(8, 4).child[0], 2);
  EXPECT_EQ(algo::binary_tree(8, 4).child[1], 6);
  EXPECT_EQ(algo::binary_tree(8, 7).parent, 6);
  EXPECT_EQ(algo::double_tree(8, 7, 1).child[1], 3) << "the mirror of 0 -> 4 is 7 -> 3";
}

TEST(Fold, PairsTheFirstRanksAndRenumbersTheRestInOrder) {
  for (int n = 1; n <= 33; ++n) {
    const algo::Fold fold(n);
    EXPECT_EQ(fold.p & (fold.p - 1), 0) << "p is a power of two";
    EXPECT_LE(fold.p, n);
    EXPECT_GT(2 * fold.p, n);
    std::set<int> virtuals;
    int previous = -1;
    for (int r = 0; r < n; ++r) {
      const int v = fold.virtual_rank(r);
      if (v < 0) {
        EXPECT_LT(r, 2 * fold.extra);
        EXPECT_EQ(r % 2, 0);
        continue;
      }
      EXPECT_GT(v, previous) << "in rank order";
      previous = v;
      EXPECT_EQ(fold.real_rank(v), r);
      virtuals.insert(v);
    }
    EXPECT_EQ(static_cast<int>(virtuals.size()), fold.p) << "n=" << n;
  }
}

TEST(RanksByHost, GroupsInRankOrder) {
  const auto hosts = algo::ranks_by_host({0, 1, 0, 2, 1, 0});
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0], (std::vector<int>{0, 2, 5}));
  EXPECT_EQ(hosts[1], (std::vector<int>{1, 4}));
  EXPECT_EQ(hosts[2], (std::vector<int>{3}));
}

}  // namespace
}  // namespace tbcoll
