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
//   U(0,i) U(1,i)          wait for chunk i of tree t's children, reduce, send it up (a root sends it down)
//   D(0,i-L) D(1,i-L)      wait for chunk i-L coming down from a parent that is not the root; send it down
// L (a few tree depths) lets the up-going chunks run ahead of the down-going ones. Both ends of a link list
// their messages in this order, and receives are posted in it (matching is FIFO per peer); chunks from children
// land in a few scratch slots, taken in posting order and freed as the up steps consume them.
#include <algorithm>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/chunking.h"
#include "algorithms/topology.h"
#include "common/enforce.h"
#include "reduce/reduce.h"

namespace tbcoll::algo {
namespace {

constexpr size_t kSlots = 8;                 // scratch slots for chunks coming up from children
constexpr size_t kMinChunkBytes = 32 << 10;  // pipelining chunks: at least this, at most TBCOLL_CHUNK_BYTES
constexpr size_t kChunksPerHalf = 16;        // ... and small enough that a large half makes this many

struct RecvItem {
  bool up;      // from a child into a slot, or from the parent straight into recv
  int tree;
  size_t chunk;
  int peer;
  size_t slot = 0;
  size_t id = 0;
  bool posted = false;
};

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

  const size_t half_bytes = (args.count + 1) / 2 * es;
  const size_t chunk_bytes =
      std::min(exec.chunk_bytes(), std::max(kMinChunkBytes, (half_bytes + kChunksPerHalf - 1) / kChunksPerHalf));
  const size_t chunk_elems = std::max<size_t>(1, chunk_bytes / es);
  std::vector<Piece> pieces[2] = {chunks(segment(args.count, 2, 0), chunk_elems),
                                  chunks(segment(args.count, 2, 1), chunk_elems)};
  const size_t phases_with_chunks = std::max(pieces[0].size(), pieces[1].size());
  const size_t lag = 2 * static_cast<size_t>(tree_depth(n)) + 2;

  // Receives in posting order (the order of the phases above), and per (tree, chunk) where its items are.
  std::vector<RecvItem> items;
  std::vector<size_t> first_up[2], down_item[2];
  for (int t = 0; t < 2; ++t) {
    first_up[t].assign(pieces[t].size(), 0);
    down_item[t].assign(pieces[t].size(), SIZE_MAX);
  }
  const bool parent_is_root[2] = {tree[0].parent == root[0], tree[1].parent == root[1]};
  for (size_t i = 0; i < phases_with_chunks + lag; ++i) {
    for (int t = 0; t < 2; ++t) {
      if (i >= pieces[t].size()) continue;
      first_up[t][i] = items.size();
      for (int child : tree[t].child) {
        if (child >= 0) items.push_back({true, t, i, child});
      }
      if (parent_is_root[t]) {  // the root sends down in its up step
        down_item[t][i] = items.size();
        items.push_back({false, t, i, tree[t].parent});
      }
    }
    for (int t = 0; t < 2; ++t) {
      if (i < lag || i - lag >= pieces[t].size() || tree[t].parent < 0 || parent_is_root[t]) continue;
      down_item[t][i - lag] = items.size();
      items.push_back({false, t, i - lag, tree[t].parent});
    }
  }

  auto* slots = static_cast<uint8_t*>(exec.scratch().get(kSlots * chunk_elems * es));
  std::vector<size_t> free_slots;
  for (size_t s = 0; s < kSlots; ++s) free_slots.push_back(kSlots - 1 - s);
  size_t posted = 0;
  auto piece_at = [&](int t, size_t k) { return pieces[t][k]; };
  // Posts receives in order for as long as slots last; then up to `needed` at least (slots are free by then).
  auto post = [&](size_t needed) {
    for (; posted < items.size(); ++posted) {
      RecvItem& item = items[posted];
      const Piece piece = piece_at(item.tree, item.chunk);
      if (item.up) {
        if (free_slots.empty()) {
          TBCOLL_ENFORCE(posted > needed || needed == SIZE_MAX);
          return;
        }
        item.slot = free_slots.back();
        free_slots.pop_back();
        item.id = exec.irecv(item.peer, slots + item.slot * chunk_elems * es, piece.count * es);
      } else {
        item.id = exec.irecv(item.peer, dst + piece.offset * es, piece.count * es);
      }
      item.posted = true;
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
  for (size_t i = 0; i < phases_with_chunks + lag; ++i) {
    for (int t = 0; t < 2; ++t) {  // U(t, i)
      if (i >= pieces[t].size()) continue;
      const Piece piece = pieces[t][i];
      const uint8_t* own = src + piece.offset * es;
      uint8_t* out = dst + piece.offset * es;
      size_t item = first_up[t][i];
      const uint8_t* partial = own;
      for (int c = 0; c < 2; ++c) {
        if (tree[t].child[c] < 0) continue;
        wait_item(item);
        const uint8_t* got = slots + items[item].slot * chunk_elems * es;
        if (c == 0) {
          kernel(out, got, partial, piece.count);  // child 0's subtree, then this rank
        } else {
          kernel(out, partial, got, piece.count);  // ..., then child 1's subtree
        }
        partial = out;
        free_slots.push_back(items[item].slot);
        ++item;
      }
      if (tree[t].parent >= 0) {
        exec.isend(tree[t].parent, partial, piece.count * es);
      } else {
        if (args.op == ReduceOp::kAvg) reduce::divide(out, out, piece.count, args.dtype, n);
        send_down(t, piece);
      }
    }
    post(SIZE_MAX);
    for (int t = 0; t < 2; ++t) {  // D(t, i - lag), and the down chunks that came straight from the root
      if (i < lag || i - lag >= pieces[t].size() || tree[t].parent < 0) continue;
      wait_item(down_item[t][i - lag]);
      send_down(t, pieces[t][i - lag]);
    }
  }
  exec.wait_all();
}

}  // namespace tbcoll::algo
