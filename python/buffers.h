// Python objects as tbcoll buffers: anything with the buffer protocol (numpy arrays, bytearray, memoryview) or
// DLPack (`__dlpack__`: torch tensors, numpy, JAX, ...), zero-copy. Only C-contiguous CPU memory of a dtype tbcoll
// knows is accepted; anything else is refused with InvalidArgument naming the argument and what is wrong.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <optional>
#include <string>

#include "tbcoll/tbcoll.hpp"

namespace tbcoll::python {

namespace py = pybind11;

/// A borrowed view of a Python buffer. `owner` keeps the memory alive (the Py_buffer or the DLPack capsule):
/// hold it for as long as tbcoll may touch the memory (until an asynchronous call completed).
struct View {
  void* data = nullptr;
  size_t count = 0;  ///< elements
  DataType dtype = DataType::kFloat32;
  py::object owner;
};

/// The view of obj, named `what` in errors ("send", "recv"). writable: refuse read-only memory. dtype: the
/// element type to use instead of the one the object declares (same element size), e.g. bf16 held in uint16.
View view_of(const py::handle& obj, const char* what, bool writable, std::optional<DataType> dtype);

/// DataType from a Python value: a tbcoll.DataType, or a name ("float32", "f32", "bfloat16", ...), or a numpy
/// dtype / torch dtype whose str() names one ("float16", "torch.bfloat16").
DataType dtype_from_python(const py::handle& value);

}  // namespace tbcoll::python
