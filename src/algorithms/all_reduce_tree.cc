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

constexpr size_t kTreeSlots = 8;                 // scratch slots for chunks coming up from children (4 per phase at most)
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

// One rank's run of the schedule: its place in both trees, the chunks, and the receives in posting order.
class TreeRun {
 public:
  TreeRun(Exec& exec, const Args& args)
      : exec_(exec),
        args_(args),
        n_(exec.size()),
        es_(args.elem_size),
        src_(static_cast<const uint8_t*>(args.send)),
        dst_(static_cast<uint8_t*>(args.recv)),
        kernel_(reduce::kernel(args.dtype, args.op)),
        tree_{double_tree(n_, exec.rank(), 0), double_tree(n_, exec.rank(), 1)},
        root_{0, n_ % 2 == 0 ? n_ - 1 : 1},
        my_up_(up_order(n_, exec.rank())) {
    const size_t half_bytes = (args.count + 1) / 2 * es_;
    const size_t chunk_bytes =
        std::min(exec.chunk_bytes(), std::max(kMinChunkBytes, (half_bytes + kChunksPerHalf - 1) / kChunksPerHalf));
    chunk_elems_ = std::max<size_t>(1, chunk_bytes / es_);
    for (int t = 0; t < 2; ++t) pieces_[t] = chunks(segment(args.count, 2, t), chunk_elems_);
    const size_t longest = std::max(pieces_[0].size(), pieces_[1].size());
    phases_ = longest + 2 * static_cast<size_t>(tree_depth(n_)) + 2;
    lag_ = phases_ - longest;
    plan_receives();
    slots_ = static_cast<uint8_t*>(exec.scratch().get(kTreeSlots * chunk_elems_ * es_));
    for (size_t s = 0; s < kTreeSlots; ++s) free_slots_.push_back(kTreeSlots - 1 - s);
  }

  void run() {
    post(SIZE_MAX);
    for (size_t i = 0; i < phases_; ++i) {
      for (int t : my_up_) up_step(t, i);  // U(t, i)
      post(SIZE_MAX);
      // D(t, i - lag): chunks from below the root, and those that came from the root
      for (int t : {my_up_[1], my_up_[0]}) {
        if (!has_down(t, i)) continue;
        wait_item(down_item_[t][i - lag_]);
        send_down(t, pieces_[t][i - lag_]);
      }
    }
    exec_.wait_all();
  }

 private:
  bool has_up(int t, size_t i) const { return i < pieces_[t].size(); }
  bool has_down(int t, size_t i) const {
    return i >= lag_ && i - lag_ < pieces_[t].size() && tree_[t].parent >= 0;
  }

  // Receives in posting order: phase by phase, each phase's in the order their senders emit them.
  void plan_receives() {
    const bool parent_is_root[2] = {tree_[0].parent == root_[0], tree_[1].parent == root_[1]};
    for (int t = 0; t < 2; ++t) {
      up_item_[t].assign(pieces_[t].size(), {SIZE_MAX, SIZE_MAX});
      down_item_[t].assign(pieces_[t].size(), SIZE_MAX);
    }
    for (size_t i = 0; i < phases_; ++i) {
      const size_t first = items_.size();
      for (int t = 0; t < 2; ++t) {
        if (!has_up(t, i)) continue;
        for (int c = 0; c < 2; ++c) {
          const int child = tree_[t].child[c];
          if (child >= 0) items_.push_back({position(up_order(n_, child), t), true, t, i, c, child});
        }
        if (parent_is_root[t]) {  // the root sends down in its up step
          items_.push_back({position(up_order(n_, root_[t]), t), false, t, i, 0, root_[t]});
        }
      }
      for (int t = 0; t < 2; ++t) {
        if (!has_down(t, i) || parent_is_root[t]) continue;
        const std::array<int, 2> up = up_order(n_, tree_[t].parent);
        items_.push_back({2 + position({up[1], up[0]}, t), false, t, i - lag_, 0, tree_[t].parent});
      }
      std::stable_sort(items_.begin() + static_cast<std::ptrdiff_t>(first), items_.end(),
                       [](const RecvItem& a, const RecvItem& b) { return a.order < b.order; });
      for (size_t k = first; k < items_.size(); ++k) {
        const RecvItem& item = items_[k];
        if (item.up) {
          up_item_[item.tree][item.chunk][static_cast<size_t>(item.child)] = k;
        } else {
          down_item_[item.tree][item.chunk] = k;
        }
      }
    }
  }

  // Posts receives in order for as long as slots last, and at least up to `needed` (whose slots are free by then:
  // every up item of an earlier phase has been consumed, and a phase has 4 at most).
  void post(size_t needed) {
    for (; posted_ < items_.size(); ++posted_) {
      RecvItem& item = items_[posted_];
      const Piece piece = pieces_[item.tree][item.chunk];
      if (item.up) {
        if (free_slots_.empty()) {
          TBCOLL_ENFORCE(needed == SIZE_MAX);
          return;
        }
        item.slot = free_slots_.back();
        free_slots_.pop_back();
        item.id = exec_.irecv(item.peer, slots_ + item.slot * chunk_elems_ * es_, piece.count * es_);
      } else {
        item.id = exec_.irecv(item.peer, dst_ + piece.offset * es_, piece.count * es_);
      }
      item.posted = true;
      if (posted_ == needed) {
        ++posted_;
        return;
      }
    }
  }

  void wait_item(size_t index) {
    if (!items_[index].posted) post(index);
    exec_.wait(items_[index].id);
  }

  void send_down(int t, Piece piece) {
    for (int child : tree_[t].child) {
      if (child >= 0) exec_.isend(child, dst_ + piece.offset * es_, piece.count * es_);
    }
  }

  // U(t, i): chunk i from tree t's children, reduced in the tree's fixed order, sent up (a root: down at once).
  void up_step(int t, size_t i) {
    if (!has_up(t, i)) return;
    const Piece piece = pieces_[t][i];
    uint8_t* out = dst_ + piece.offset * es_;
    const uint8_t* partial = src_ + piece.offset * es_;
    for (int c = 0; c < 2; ++c) {
      if (tree_[t].child[c] < 0) continue;
      const size_t item = up_item_[t][i][static_cast<size_t>(c)];
      wait_item(item);
      const uint8_t* got = slots_ + items_[item].slot * chunk_elems_ * es_;
      if (c == 0) {
        kernel_(out, got, partial, piece.count);  // child 0's subtree, then this rank
      } else {
        kernel_(out, partial, got, piece.count);  // ..., then child 1's subtree
      }
      partial = out;
      free_slots_.push_back(items_[item].slot);
    }
    if (tree_[t].parent >= 0) {
      exec_.isend(tree_[t].parent, partial, piece.count * es_);
    } else {
      if (args_.op == ReduceOp::kAvg) reduce::divide(out, out, piece.count, args_.dtype, n_);
      send_down(t, piece);
    }
  }

  Exec& exec_;
  const Args& args_;
  const int n_;
  const size_t es_;
  const uint8_t* src_;
  uint8_t* dst_;
  const reduce::Kernel kernel_;
  const TreeLinks tree_[2];
  const int root_[2];
  const std::array<int, 2> my_up_;
  size_t chunk_elems_ = 1;
  std::vector<Piece> pieces_[2];
  size_t phases_ = 0, lag_ = 0;
  std::vector<RecvItem> items_;
  std::vector<std::array<size_t, 2>> up_item_[2];
  std::vector<size_t> down_item_[2];
  uint8_t* slots_ = nullptr;
  std::vector<size_t> free_slots_;
  size_t posted_ = 0;
};

}  // namespace

void all_reduce_tree(Exec& exec, const Args& args) { TreeRun(exec, args).run(); }

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
