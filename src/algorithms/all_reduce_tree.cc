// Double binary tree all-reduce (NCCL's): two complementary binary trees (topology.h), each carrying half of
// the data, chunked and pipelined. In each tree a chunk is reduced up to the root and the result sent back down.
//
//   tree 0 (n = 8)      tree 1 (mirror)        half 0 goes up and down tree 0, half 1 up and down tree 1, at once;
//        0                   7                 a leaf of one tree is an inner node of the other, so every rank
//        |                   |                 sends and receives about S per direction in all.
//        4                   3
//      /   \               /   \               up:   inner rank: chunk = child0 op own op child1 (in that fixed
//     2     6             5     1                    order), sent to the parent; the root has the full result
//    / \   / \           / \   / \             down: the root sends each result chunk to its children as soon as
//   1   3 5   7         6   4 2   0                  it is reduced; inner ranks forward it
//
// Cost: 2 ceil(log2 n) steps of latency (up then down) plus S/2 per tree per direction through each link, about
// S sent and S received per rank: log n latency at full bandwidth once the chunks pipeline. Reduction: each
// element is reduced once, at its tree's root along a fixed tree (avg divided there), then copied down, so every
// rank ends with bitwise identical results.
//
// Order of messages. Every rank runs the same program of phases i = 0, 1, ...:
//   U(a,i) U(b,i)          up steps: wait for chunk i from tree t's children, reduce, send it up (a root sends
//                          it down at once)
//   D(b,i-L) D(a,i-L)      down steps: wait for chunk i-L from a parent that is not the root; send it down
// a is the tree this rank is a leaf of, b the one it is an inner node of (each rank is inner in one tree at
// most), so a leaf's chunk leaves before it waits for anything, and both trees' waves move at once: one chunk
// costs 2 ceil(log2 n) latencies, not twice that. L (a few tree depths) lets the up-going chunks run ahead of the
// down-going ones. Receives are posted per phase in the order the sending peer emits (matching is FIFO per
// peer; each side computes the other's order); chunks from children land in a few scratch slots, freed as the up
// steps consume them.
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/chunking.h"
#include "algorithms/cost.h"
#include "algorithms/registry.h"
#include "algorithms/topology.h"
#include "common/enforce.h"
#include "reduce/reduce.h"

namespace tbcoll::algo {
namespace {

constexpr size_t kSlots = 8;                 // scratch slots for chunks coming up from children (4 per phase at most)
constexpr size_t kMinChunkBytes = 32 << 10;  // pipelining chunks: at least this, at most TBCOLL_CHUNK_BYTES
constexpr size_t kChunksPerHalf = 16;        // ... and small enough that a large half makes this many

struct RecvItem {
  int order;    // the sender's position of the step that sends it, within the phase
  bool up;      // from a child into a slot, or from the parent straight into recv
  int tree;
  size_t chunk;
  int child;    // 0 or 1: which child (up items)
  int peer;
  size_t slot = 0;
  size_t id = 0;
  bool posted = false;
};

// The order in which rank r runs its up steps in a phase: the tree it is a leaf of first. Its down steps go the
// other way round (the tree it forwards in first).
std::array<int, 2> up_order(int n, int r) {
  const TreeLinks zero = double_tree(n, r, 0);
  const bool inner_in_zero = zero.child[0] >= 0 || zero.child[1] >= 0;
  return inner_in_zero ? std::array<int, 2>{1, 0} : std::array<int, 2>{0, 1};
}

int position(const std::array<int, 2>& order, int tree) { return order[0] == tree ? 0 : 1; }

}  // namespace

void all_reduce_tree(Exec& exec, const Args& args) {
  const int n = exec.size();
  const int r = exec.rank();
  const size_t es = args.elem_size;
  const auto* src = static_cast<const uint8_t*>(args.send);
  auto* dst = static_cast<uint8_t*>(args.recv);
  const reduce::Kernel kernel = reduce::kernel(args.dtype, args.op);
  const TreeLinks tree[2] = {double_tree(n, r, 0), double_tree(n, r, 1)};
  const int root[2] = {0, n % 2 == 0 ? n - 1 : 1};
  const std::array<int, 2> my_up = up_order(n, r);
  const std::array<int, 2> my_down = {my_up[1], my_up[0]};

  const size_t half_bytes = (args.count + 1) / 2 * es;
  const size_t chunk_bytes =
      std::min(exec.chunk_bytes(), std::max(kMinChunkBytes, (half_bytes + kChunksPerHalf - 1) / kChunksPerHalf));
  const size_t chunk_elems = std::max<size_t>(1, chunk_bytes / es);
  std::vector<Piece> pieces[2] = {chunks(segment(args.count, 2, 0), chunk_elems),
                                  chunks(segment(args.count, 2, 1), chunk_elems)};
  const size_t phases = std::max(pieces[0].size(), pieces[1].size()) + 2 * static_cast<size_t>(tree_depth(n)) + 2;
  const size_t lag = phases - std::max(pieces[0].size(), pieces[1].size());
  auto has_up = [&](int t, size_t i) { return i < pieces[t].size(); };
  auto has_down = [&](int t, size_t i) { return i >= lag && i - lag < pieces[t].size() && tree[t].parent >= 0; };

  // Receives in posting order: phase by phase, each phase's in the order their senders emit them.
  const bool parent_is_root[2] = {tree[0].parent == root[0], tree[1].parent == root[1]};
  std::vector<RecvItem> items;
  std::vector<std::array<size_t, 2>> up_item[2];
  std::vector<size_t> down_item[2];
  for (int t = 0; t < 2; ++t) {
    up_item[t].assign(pieces[t].size(), {SIZE_MAX, SIZE_MAX});
    down_item[t].assign(pieces[t].size(), SIZE_MAX);
  }
  for (size_t i = 0; i < phases; ++i) {
    const size_t first = items.size();
    for (int t = 0; t < 2; ++t) {
      if (!has_up(t, i)) continue;
      for (int c = 0; c < 2; ++c) {
        const int child = tree[t].child[c];
        if (child >= 0) items.push_back({position(up_order(n, child), t), true, t, i, c, child});
      }
      if (parent_is_root[t]) {  // the root sends down in its up step
        items.push_back({position(up_order(n, root[t]), t), false, t, i, 0, root[t]});
      }
    }
    for (int t = 0; t < 2; ++t) {
      if (!has_down(t, i) || parent_is_root[t]) continue;
      const std::array<int, 2> up = up_order(n, tree[t].parent);
      items.push_back({2 + position({up[1], up[0]}, t), false, t, i - lag, 0, tree[t].parent});
    }
    std::stable_sort(items.begin() + static_cast<std::ptrdiff_t>(first), items.end(),
                     [](const RecvItem& a, const RecvItem& b) { return a.order < b.order; });
    for (size_t k = first; k < items.size(); ++k) {
      const RecvItem& item = items[k];
      if (item.up) {
        up_item[item.tree][item.chunk][static_cast<size_t>(item.child)] = k;
      } else {
        down_item[item.tree][item.chunk] = k;
      }
    }
  }

  auto* slots = static_cast<uint8_t*>(exec.scratch().get(kSlots * chunk_elems * es));
  std::vector<size_t> free_slots;
  for (size_t s = 0; s < kSlots; ++s) free_slots.push_back(kSlots - 1 - s);
  size_t posted = 0;
  // Posts receives in order for as long as slots last, and at least up to `needed` (whose slots are free by then:
  // every up item of an earlier phase has been consumed, and a phase has 4 at most).
  auto post = [&](size_t needed) {
    for (; posted < items.size(); ++posted) {
      RecvItem& item = items[posted];
      const Piece piece = pieces[item.tree][item.chunk];
      if (item.up) {
        if (free_slots.empty()) {
          TBCOLL_ENFORCE(needed == SIZE_MAX);
          return;
        }
        item.slot = free_slots.back();
        free_slots.pop_back();
        item.id = exec.irecv(item.peer, slots + item.slot * chunk_elems * es, piece.count * es);
      } else {
        item.id = exec.irecv(item.peer, dst + piece.offset * es, piece.count * es);
      }
      item.posted = true;
      if (posted == needed) {
        ++posted;
        return;
      }
    }
  };
  auto wait_item = [&](size_t index) {
    if (!items[index].posted) post(index);
    exec.wait(items[index].id);
  };
  auto send_down = [&](int t, Piece piece) {
    for (int child : tree[t].child) {
      if (child >= 0) exec.isend(child, dst + piece.offset * es, piece.count * es);
    }
  };

  post(SIZE_MAX);
  for (size_t i = 0; i < phases; ++i) {
    for (int t : my_up) {  // U(t, i)
      if (!has_up(t, i)) continue;
      const Piece piece = pieces[t][i];
      uint8_t* out = dst + piece.offset * es;
      const uint8_t* partial = src + piece.offset * es;
      for (int c = 0; c < 2; ++c) {
        if (tree[t].child[c] < 0) continue;
        const size_t item = up_item[t][i][static_cast<size_t>(c)];
        wait_item(item);
        const uint8_t* got = slots + items[item].slot * chunk_elems * es;
        if (c == 0) {
          kernel(out, got, partial, piece.count);  // child 0's subtree, then this rank
        } else {
          kernel(out, partial, got, piece.count);  // ..., then child 1's subtree
        }
        partial = out;
        free_slots.push_back(items[item].slot);
      }
      if (tree[t].parent >= 0) {
        exec.isend(tree[t].parent, partial, piece.count * es);
      } else {
        if (args.op == ReduceOp::kAvg) reduce::divide(out, out, piece.count, args.dtype, n);
        send_down(t, piece);
      }
    }
    post(SIZE_MAX);
    for (int t : my_down) {  // D(t, i - lag): chunks from below the root, and those that came from the root
      if (!has_down(t, i)) continue;
      wait_item(down_item[t][i - lag]);
      send_down(t, pieces[t][i - lag]);
    }
  }
  exec.wait_all();
}

TBCOLL_ALGORITHM(all_reduce_tree) {
  Algorithm row;
  row.kind = OpKind::kAllReduce;
  row.name = "tree";
  row.description =
      "double binary tree, each tree half the data, chunked: reduce up, broadcast down: 2 "
      "ceil(log2 n) steps, about S sent per rank";
  row.run = all_reduce_tree;
  row.cost = cost_all_reduce_tree;
  row.position = 20;
  row.auto_range = by_model;
  return row;
}

}  // namespace tbcoll::algo
