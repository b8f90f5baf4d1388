// The size of one element, inline, for the per-call paths whose dtype the call's checks already accepted.
#pragma once

#include <cstddef>

#include "tbcoll/tbcoll.hpp"

namespace tbcoll {

/// The bytes of one element of dtype; 0 for a value that is no DataType (dtype_size, the public form, throws).
constexpr size_t element_size(DataType dtype) {
  switch (dtype) {
    case DataType::kInt8:
    case DataType::kUint8: return 1;
    case DataType::kFloat16:
    case DataType::kBfloat16: return 2;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32: return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64: return 8;
  }
  return 0;
}

}  // namespace tbcoll
