#include "tensors.h"

#include <fmt/format.h>

namespace tbcoll::torch_pg {

void refuse(const char* op, const std::string& message) {
  throw c10::Error(fmt::format("[tbcoll] {}: {}", op, message), "");
}

namespace {

bool tbcoll_dtype(at::ScalarType type, DataType* out) {
  switch (type) {
    case at::kChar: *out = DataType::kInt8; return true;
    case at::kByte: *out = DataType::kUint8; return true;
    case at::kBool: *out = DataType::kUint8; return true;
    case at::kInt: *out = DataType::kInt32; return true;
    case at::kLong: *out = DataType::kInt64; return true;
    case at::kHalf: *out = DataType::kFloat16; return true;
    case at::kBFloat16: *out = DataType::kBfloat16; return true;
    case at::kFloat: *out = DataType::kFloat32; return true;
    case at::kDouble: *out = DataType::kFloat64; return true;
    default: return false;
  }
}

}  // namespace

Buffer buffer_of(const at::Tensor& t, const char* op, const std::string& what) {
  if (!t.defined()) refuse(op, what + " is undefined");
  if (!t.device().is_cpu()) refuse(op, fmt::format("{} is on {}; tbcoll moves CPU tensors", what, t.device().str()));
  if (!t.is_contiguous()) refuse(op, what + " is not contiguous; pass t.contiguous()");
  if (t.is_sparse()) refuse(op, what + " is sparse; tbcoll moves dense tensors");
  Buffer b;
  b.data = t.data_ptr();
  b.count = static_cast<size_t>(t.numel());
  at::ScalarType type = t.scalar_type();
  if (t.is_complex()) {
    b.complex = true;
    b.count *= 2;
    type = c10::toRealValueType(type);
  }
  if (!tbcoll_dtype(type, &b.dtype)) {
    refuse(op, fmt::format("{} has dtype {}, which tbcoll does not move (int8, uint8, bool, int32, int64, float16, "
                           "bfloat16, float32, float64 and complex of the floats)", what, c10::toString(t.scalar_type())));
  }
  return b;
}

ReduceOp reduce_op(const c10d::ReduceOp& op, const char* name, const at::Tensor& t) {
  const bool complex = t.is_complex();
  if (t.scalar_type() == at::kBool) {
    if (op.op_ == c10d::ReduceOp::SUM || op.op_ == c10d::ReduceOp::MAX) return ReduceOp::kMax;
    if (op.op_ == c10d::ReduceOp::PRODUCT || op.op_ == c10d::ReduceOp::MIN) return ReduceOp::kMin;
  }
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return ReduceOp::kSum;
    case c10d::ReduceOp::PREMUL_SUM: return ReduceOp::kSum;  // inputs scaled first: premul_scaled()
    case c10d::ReduceOp::AVG: return ReduceOp::kAvg;
    default: break;
  }
  if (complex) refuse(name, "complex tensors take SUM and AVG only");
  switch (op.op_) {
    case c10d::ReduceOp::PRODUCT: return ReduceOp::kProd;
    case c10d::ReduceOp::MIN: return ReduceOp::kMin;
    case c10d::ReduceOp::MAX: return ReduceOp::kMax;
    default: break;
  }
  static const char* const names[] = {"SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"};
  const unsigned index = static_cast<unsigned>(op.op_);
  refuse(name, fmt::format("reduction {} is not supported (SUM, AVG, PRODUCT, MIN, MAX)",
                           index < 9 ? names[index] : std::to_string(index)));
}

at::Tensor premul_scaled(const c10d::ReduceOp& op, at::Tensor& t, bool in_place) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return t;
  const auto* factor = dynamic_cast<const c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  if (factor == nullptr) refuse("PREMUL_SUM", "the op carries no factor (make it with _make_nccl_premul_sum)");
  if (factor->tensor_factors.empty()) {
    return in_place ? t.mul_(factor->double_factor) : t.mul(factor->double_factor);
  }
  const at::Tensor& f = factor->tensor_factors[0];
  if (f.numel() != 1) refuse("PREMUL_SUM", fmt::format("the factor tensor has {} elements, not 1", f.numel()));
  const at::Tensor scalar = f.to(at::kCPU).to(t.scalar_type());
  return in_place ? t.mul_(scalar) : t.mul(scalar);
}

at::Tensor& one(std::vector<at::Tensor>& tensors, const char* op) {
  if (tensors.size() != 1) refuse(op, fmt::format("takes one tensor per process, got {}", tensors.size()));
  return tensors[0];
}

void check_like(const std::vector<at::Tensor>& list, const at::Tensor& t, const char* op, const char* what) {
  for (size_t i = 0; i < list.size(); ++i) {
    buffer_of(list[i], op, fmt::format("{} {}", what, i));
    if (list[i].scalar_type() != t.scalar_type() || list[i].numel() != t.numel()) {
      refuse(op, fmt::format("{} {} has {} elements of {}; the input has {} of {}", what, i, list[i].numel(),
                             c10::toString(list[i].scalar_type()), t.numel(), c10::toString(t.scalar_type())));
    }
  }
}

bool consecutive(const std::vector<at::Tensor>& list) {
  if (list.empty()) return true;
  auto* next = static_cast<uint8_t*>(list[0].data_ptr());
  for (const auto& t : list) {
    if (!t.is_contiguous() || static_cast<uint8_t*>(t.data_ptr()) != next) return false;
    next += t.numel() * t.element_size();
  }
  return true;
}

at::Tensor flatten(const std::vector<at::Tensor>& list) {
  std::vector<at::Tensor> flat;
  flat.reserve(list.size());
  for (const auto& t : list) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& list, int64_t offset) {
  for (const auto& t : list) {
    const_cast<at::Tensor&>(t).copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace tbcoll::torch_pg
