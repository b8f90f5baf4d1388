// Names and sizes of data types and reduction operators.
#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "common/dtype.h"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll {

size_t dtype_size(DataType dtype) {
  if (const size_t bytes = element_size(dtype); bytes != 0) return bytes;
  throw InvalidArgument(fmt::format("invalid dtype {} (valid: 0..{})", static_cast<int>(dtype), kNumDataTypes - 1));
}

bool is_floating_point(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kBfloat16 || dtype == DataType::kFloat32 ||
         dtype == DataType::kFloat64;
}

bool is_unsigned(DataType dtype) {
  return dtype == DataType::kUint8 || dtype == DataType::kUint32 || dtype == DataType::kUint64;
}

std::string to_string(DataType dtype) {
  switch (dtype) {
    case DataType::kInt8: return "i8";
    case DataType::kUint8: return "u8";
    case DataType::kInt32: return "i32";
    case DataType::kUint32: return "u32";
    case DataType::kInt64: return "i64";
    case DataType::kUint64: return "u64";
    case DataType::kFloat16: return "f16";
    case DataType::kFloat32: return "f32";
    case DataType::kFloat64: return "f64";
    case DataType::kBfloat16: return "bf16";
  }
  return fmt::format("invalid({})", static_cast<int>(dtype));
}

std::string to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kAvg: return "avg";
  }
  return fmt::format("invalid({})", static_cast<int>(op));
}

DataType parse_dtype(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  static const std::pair<const char*, DataType> kNames[] = {
      {"i8", DataType::kInt8},       {"int8", DataType::kInt8},         {"char", DataType::kInt8},
      {"u8", DataType::kUint8},      {"uint8", DataType::kUint8},       {"i32", DataType::kInt32},
      {"int32", DataType::kInt32},   {"int", DataType::kInt32},         {"u32", DataType::kUint32},
      {"uint32", DataType::kUint32}, {"i64", DataType::kInt64},         {"int64", DataType::kInt64},
      {"u64", DataType::kUint64},    {"uint64", DataType::kUint64},     {"f16", DataType::kFloat16},
      {"half", DataType::kFloat16},  {"float16", DataType::kFloat16},   {"f32", DataType::kFloat32},
      {"float", DataType::kFloat32}, {"float32", DataType::kFloat32},   {"f64", DataType::kFloat64},
      {"double", DataType::kFloat64}, {"float64", DataType::kFloat64},  {"bf16", DataType::kBfloat16},
      {"bfloat16", DataType::kBfloat16}};
  for (const auto& [text, dtype] : kNames) {
    if (lower == text) return dtype;
  }
  throw InvalidArgument(fmt::format("unknown dtype {:?} (i8 u8 i32 u32 i64 u64 f16 bf16 f32 f64)", name));
}

ReduceOp parse_op(const std::string& name) {
  for (int i = 0; i < kNumReduceOps; ++i) {
    if (to_string(static_cast<ReduceOp>(i)) == name) return static_cast<ReduceOp>(i);
  }
  throw InvalidArgument(fmt::format("unknown reduction {:?} (sum prod max min avg)", name));
}

}  // namespace tbcoll
