// What the process group checks and converts: tensors (CPU, contiguous, a dtype tbcoll has), reduction ops,
// lists of tensors. Errors are c10::Error (Python RuntimeError) naming the op, the tensor and what is wrong.
#pragma once

#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "tbcoll/tbcoll.hpp"

namespace tbcoll::torch_pg {

/// A tensor as tbcoll moves it: its data, element count and dtype (a complex tensor as its real pairs).
struct Buffer {
  void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  bool complex = false;
};

/// Checks t (CPU, contiguous, a dtype tbcoll has) for op; what names it in errors ("allreduce's tensor").
Buffer buffer_of(const at::Tensor& t, const char* op, const std::string& what);
/// tbcoll's op for t's reduction by torch's op; complex tensors take SUM and AVG only (the others are not
/// elementwise on pairs); bool ones reduce as logical or (SUM, MAX) and and (PRODUCT, MIN).
/// PREMUL_SUM (torch.distributed._make_nccl_premul_sum) is kSum of inputs pre-multiplied with premul_scaled().
ReduceOp reduce_op(const c10d::ReduceOp& op, const char* name, const at::Tensor& t);
/// For PREMUL_SUM: t multiplied by the op's factor (a number, or a one-element tensor), in place when in_place
/// (a tensor the call overwrites anyway) and else into a new tensor, returned; for any other op, t as it is.
at::Tensor premul_scaled(const c10d::ReduceOp& op, at::Tensor& t, bool in_place);
/// The single tensor of a list that must hold one.
at::Tensor& one(std::vector<at::Tensor>& tensors, const char* op);
/// Checks every tensor of list has t's dtype and element count; what: "allgather's output".
void check_like(const std::vector<at::Tensor>& list, const at::Tensor& t, const char* op, const char* what);
/// True when the tensors are consecutive pieces of one buffer, in order (a gather can land there directly).
bool consecutive(const std::vector<at::Tensor>& list);
/// The tensors, flattened and concatenated into one new tensor.
at::Tensor flatten(const std::vector<at::Tensor>& list);
/// Copies consecutive pieces of flat into the tensors of list (each its own numel), starting at offset.
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& list, int64_t offset = 0);
/// A c10::Error "[tbcoll] op: message".
[[noreturn]] void refuse(const char* op, const std::string& message);

}  // namespace tbcoll::torch_pg
