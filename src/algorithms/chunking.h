// Pure partitioning maths shared by the schedules (unit-tested on their own).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace tbcoll::algo {

/// A run of elements [offset, offset + count).
struct Piece {
  size_t offset = 0;
  size_t count = 0;
};

/// Segment i of count elements split into parts nearly equal parts (the first count % parts get one more).
inline Piece segment(size_t count, int parts, int i) {
  size_t base = count / static_cast<size_t>(parts);
  size_t extra = count % static_cast<size_t>(parts);
  size_t index = static_cast<size_t>(i);
  return {index * base + std::min(index, extra), base + (index < extra ? 1 : 0)};
}

/// Segment i of count elements split into `parts` runs of equal length, each a whole number of align elements
/// (the last ones shorter or empty): slices that never share a cache line. align >= 1.
inline Piece aligned_segment(size_t count, int parts, int i, size_t align) {
  size_t per = (count + static_cast<size_t>(parts) - 1) / static_cast<size_t>(parts);
  per = (per + align - 1) / align * align;
  const size_t offset = std::min(count, static_cast<size_t>(i) * per);
  return {offset, std::min(count, offset + per) - offset};
}

/// Splits piece into chunks of at most max_elems elements (at least 1); empty piece -> no chunks.
inline std::vector<Piece> chunks(Piece piece, size_t max_elems) {
  std::vector<Piece> out;
  max_elems = std::max<size_t>(1, max_elems);
  for (size_t done = 0; done < piece.count; done += max_elems) {
    out.push_back({piece.offset + done, std::min(max_elems, piece.count - done)});
  }
  return out;
}

/// (a mod n) for possibly negative a.
inline int mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace tbcoll::algo
