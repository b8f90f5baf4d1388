#include "benchmarks/perf_check.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "reduce/reduce.h"

namespace tbcoll::bench {
namespace {

bool is_reduction(Collective kind) {
  return kind == Collective::kAllReduce || kind == Collective::kReduceScatter || kind == Collective::kReduce;
}

uint64_t mix(int rank, size_t i) {  // splitmix64 of (rank, i)
  uint64_t x = (static_cast<uint64_t>(static_cast<uint32_t>(rank)) << 40) ^ static_cast<uint64_t>(i);
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Largest integer magnitude the dtype holds exactly (floats) or without wrapping (integers).
double exact_limit(DataType dtype) {
  switch (dtype) {
    case DataType::kInt8: return 127;
    case DataType::kUint8: return 255;
    case DataType::kFloat16: return 2048;
    case DataType::kBfloat16: return 256;
    default: return 1 << 24;
  }
}

// Inputs are integers in [-k, k] ([0, k] unsigned). Sums of world_size of them stay within the exact range.
// Float averages take world_size * w instead, so the quotient is w whether the library divides first (f16) or
// last; summing the scaled inputs (last) then needs k <= limit / n^2. Large worlds clamp k to 1 (inexact).
double input_range(const CheckSpec& s, bool* exact) {
  const double n = is_reduction(s.kind) ? s.world_size : 1;
  const bool scaled = s.op == ReduceOp::kAvg && is_floating_point(s.dtype) && s.dtype != DataType::kFloat16;
  const double k = std::floor(exact_limit(s.dtype) / n / (scaled ? n : 1));
  if (exact != nullptr) *exact = k >= 1 || !is_floating_point(s.dtype);
  return std::max(1.0, k);
}

double input_value(const CheckSpec& s, int rank, size_t i) {
  const uint64_t h = mix(rank, i);
  if (is_reduction(s.kind) && s.op == ReduceOp::kProd) {
    // Magnitudes 1 and 2: a partial product never overflows before the whole one does.
    switch (h % 8) {
      case 0: return 2;
      case 1: return is_unsigned(s.dtype) ? 2 : -1;
      default: return 1;
    }
  }
  const auto k = static_cast<uint64_t>(input_range(s, nullptr));
  const double w = is_unsigned(s.dtype) ? static_cast<double>(h % (k + 1))
                                        : static_cast<double>(static_cast<int64_t>(h % (2 * k + 1)) -
                                                              static_cast<int64_t>(k));
  const bool scaled = is_reduction(s.kind) && s.op == ReduceOp::kAvg && is_floating_point(s.dtype);
  return scaled ? w * s.world_size : w;
}

void store_float(DataType dtype, void* base, size_t i, double v) {
  switch (dtype) {
    case DataType::kFloat16: static_cast<uint16_t*>(base)[i] = reduce::float_to_half(static_cast<float>(v)); break;
    case DataType::kBfloat16: static_cast<uint16_t*>(base)[i] = reduce::float_to_bf16(static_cast<float>(v)); break;
    case DataType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(v); break;
    default: static_cast<double*>(base)[i] = v; break;
  }
}

// Integers are stored modulo 2^bits (the library's wrap-around).
void store_int(DataType dtype, void* base, size_t i, uint64_t bits) {
  switch (dtype) {
    case DataType::kInt8:
    case DataType::kUint8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(bits); break;
    case DataType::kInt32:
    case DataType::kUint32: static_cast<uint32_t*>(base)[i] = static_cast<uint32_t>(bits); break;
    default: static_cast<uint64_t*>(base)[i] = bits; break;
  }
}

// An integer element as its dtype's value: sign-extended for signed types.
int64_t signed_value(DataType dtype, uint64_t bits) {
  switch (dtype) {
    case DataType::kInt8: return static_cast<int8_t>(static_cast<uint8_t>(bits));
    case DataType::kInt32: return static_cast<int32_t>(static_cast<uint32_t>(bits));
    default: return static_cast<int64_t>(bits);
  }
}

void store_value(DataType dtype, void* base, size_t i, double v) {
  if (is_floating_point(dtype)) store_float(dtype, base, i, v);
  else store_int(dtype, base, i, static_cast<uint64_t>(static_cast<int64_t>(v)));
}

double load_value(DataType dtype, const void* base, size_t i) {
  switch (dtype) {
    case DataType::kFloat16: return reduce::half_to_float(static_cast<const uint16_t*>(base)[i]);
    case DataType::kBfloat16: return reduce::bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DataType::kFloat32: return static_cast<const float*>(base)[i];
    default: return static_cast<const double*>(base)[i];
  }
}

// Element `index` of the full reduction, stored into out[0].
void expected_reduction(const CheckSpec& s, size_t index, void* out) {
  const int n = s.world_size;
  if (is_floating_point(s.dtype)) {
    double acc = input_value(s, 0, index);
    for (int r = 1; r < n; ++r) {
      const double v = input_value(s, r, index);
      if (s.op == ReduceOp::kSum || s.op == ReduceOp::kAvg) acc += v;
      else if (s.op == ReduceOp::kProd) acc *= v;
      else if (s.op == ReduceOp::kMax) acc = std::max(acc, v);
      else acc = std::min(acc, v);
    }
    if (s.op == ReduceOp::kAvg) acc /= n;  // exact: the inputs are multiples of n
    store_float(s.dtype, out, 0, acc);
    return;
  }
  // Integers: sums and products wrap modulo 2^64 here and modulo 2^bits when stored; inputs fit every dtype.
  uint64_t acc = static_cast<uint64_t>(static_cast<int64_t>(input_value(s, 0, index)));
  for (int r = 1; r < n; ++r) {
    const auto v = static_cast<uint64_t>(static_cast<int64_t>(input_value(s, r, index)));
    if (s.op == ReduceOp::kSum || s.op == ReduceOp::kAvg) acc += v;
    else if (s.op == ReduceOp::kProd) acc *= v;
    else if (s.op == ReduceOp::kMax) acc = static_cast<int64_t>(v) > static_cast<int64_t>(acc) ? v : acc;
    else acc = static_cast<int64_t>(v) < static_cast<int64_t>(acc) ? v : acc;
  }
  if (s.op == ReduceOp::kAvg) {  // the wrapped sum, divided truncating toward zero
    store_int(s.dtype, out, 0, acc);
    uint64_t wrapped = 0;
    std::memcpy(&wrapped, out, dtype_size(s.dtype));
    acc = is_unsigned(s.dtype) ? wrapped / static_cast<uint64_t>(n)
                               : static_cast<uint64_t>(signed_value(s.dtype, wrapped) / n);
  }
  store_int(s.dtype, out, 0, acc);
}

}  // namespace

void fill_input(const CheckSpec& spec, int rank, void* data, size_t elements) {
  for (size_t i = 0; i < elements; ++i) store_value(spec.dtype, data, i, input_value(spec, rank, i));
}

long long count_wrong(const CheckSpec& spec, int rank, const void* result, size_t count) {
  const size_t es = dtype_size(spec.dtype);
  const auto* got = static_cast<const uint8_t*>(result);
  uint8_t want[8];
  long long wrong = 0;
  auto compare = [&](size_t i, bool exact) {
    if (exact) {
      wrong += std::memcmp(got + i * es, want, es) != 0;
    } else {  // sums beyond the exact range (worlds too large for it): a relative tolerance
      const double g = load_value(spec.dtype, got, i), w = load_value(spec.dtype, want, 0);
      wrong += !(std::fabs(g - w) <= 1e-2 * std::max(1.0, std::fabs(w)));
    }
  };
  if (is_reduction(spec.kind)) {
    if (spec.kind == Collective::kReduce && rank != spec.root) return 0;
    bool exact = true;
    if (spec.op != ReduceOp::kProd) input_range(spec, &exact);
    const size_t first = spec.kind == Collective::kReduceScatter ? static_cast<size_t>(rank) * count : 0;
    for (size_t i = 0; i < count; ++i) {
      expected_reduction(spec, first + i, want);
      compare(i, exact);
    }
  } else if (spec.kind == Collective::kAllToAll) {
    for (int r = 0; r < spec.world_size; ++r) {
      for (size_t i = 0; i < count; ++i) {
        store_value(spec.dtype, want, 0, input_value(spec, r, static_cast<size_t>(rank) * count + i));
        compare(static_cast<size_t>(r) * count + i, true);
      }
    }
  } else if (spec.kind == Collective::kScatter) {
    for (size_t i = 0; i < count; ++i) {
      store_value(spec.dtype, want, 0, input_value(spec, spec.root, static_cast<size_t>(rank) * count + i));
      compare(i, true);
    }
  } else if (spec.kind == Collective::kAllGather || spec.kind == Collective::kGather) {
    if (spec.kind == Collective::kGather && rank != spec.root) return 0;
    for (int r = 0; r < spec.world_size; ++r) {
      for (size_t i = 0; i < count; ++i) {
        store_value(spec.dtype, want, 0, input_value(spec, r, i));
        compare(static_cast<size_t>(r) * count + i, true);
      }
    }
  } else {
    for (size_t i = 0; i < count; ++i) {
      store_value(spec.dtype, want, 0, input_value(spec, spec.root, i));
      compare(i, true);
    }
  }
  return wrong;
}

}  // namespace tbcoll::bench
