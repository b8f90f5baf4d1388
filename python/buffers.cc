#include "buffers.h"

#include <cstdint>
#include <cstring>
#include <memory>

#include <fmt/format.h>

namespace tbcoll::python {
namespace {

// DLPack 0.x, the version numpy 1.22+ and torch 1.10+ export ("dltensor" capsules holding a DLManagedTensor).
struct DLDevice {
  int32_t device_type;  // 1: kDLCPU, 3: kDLCUDAHost
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null: compact row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};

std::optional<DataType> dtype_of_dlpack(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  switch (t.code) {
    case 0:
      if (t.bits == 8) return DataType::kInt8;
      if (t.bits == 32) return DataType::kInt32;
      if (t.bits == 64) return DataType::kInt64;
      break;
    case 1:
      if (t.bits == 8) return DataType::kUint8;
      if (t.bits == 32) return DataType::kUint32;
      if (t.bits == 64) return DataType::kUint64;
      break;
    case 2:
      if (t.bits == 16) return DataType::kFloat16;
      if (t.bits == 32) return DataType::kFloat32;
      if (t.bits == 64) return DataType::kFloat64;
      break;
    case 4:
      if (t.bits == 16) return DataType::kBfloat16;
      break;
    default:
      break;
  }
  return std::nullopt;
}

// Struct-module format characters (the buffer protocol), with the item size the buffer declares.
std::optional<DataType> dtype_of_format(const std::string& format, size_t itemsize) {
  std::string f = format;
  if (!f.empty() && (f[0] == '<' || f[0] == '=' || f[0] == '@' || f[0] == '!' || f[0] == '>')) {
    if (f[0] == '>' || f[0] == '!') return std::nullopt;  // big-endian data: not what the kernels read
    f = f.substr(1);
  }
  if (f.size() != 1) return std::nullopt;
  const bool is_signed = f[0] == 'b' || f[0] == 'h' || f[0] == 'i' || f[0] == 'l' || f[0] == 'q' || f[0] == 'n';
  const bool is_unsigned = f[0] == 'B' || f[0] == 'H' || f[0] == 'I' || f[0] == 'L' || f[0] == 'Q' || f[0] == 'N';
  if (is_signed || is_unsigned) {
    switch (itemsize) {
      case 1:
        return is_signed ? DataType::kInt8 : DataType::kUint8;
      case 4:
        return is_signed ? DataType::kInt32 : DataType::kUint32;
      case 8:
        return is_signed ? DataType::kInt64 : DataType::kUint64;
      default:
        return std::nullopt;  // 16-bit integers: no such dtype in tbcoll
    }
  }
  if (f[0] == 'e' && itemsize == 2) return DataType::kFloat16;
  if (f[0] == 'f' && itemsize == 4) return DataType::kFloat32;
  if (f[0] == 'd' && itemsize == 8) return DataType::kFloat64;
  if (f[0] == 'c' && itemsize == 1) return DataType::kUint8;  // bytes
  return std::nullopt;
}

View finish(View view, const char* what, size_t itemsize, const std::string& declared, std::optional<DataType> dtype,
            std::optional<DataType> own) {
  if (dtype) {
    if (dtype_size(*dtype) != itemsize) {
      throw InvalidArgument(fmt::format("{}: dtype {} has {}-byte elements but the buffer holds {} ({}-byte items)",
                                        what, to_string(*dtype), dtype_size(*dtype), declared, itemsize));
    }
    view.dtype = *dtype;
  } else if (own) {
    view.dtype = *own;
  } else {
    throw InvalidArgument(fmt::format(
        "{}: element type {} is not one tbcoll reduces (int8, uint8, int32, uint32, int64, uint64, float16, "
        "bfloat16, float32, float64); pass dtype= to reinterpret same-size elements",
        what, declared));
  }
  return view;
}

View from_buffer(const py::handle& obj, const char* what, bool writable, std::optional<DataType> dtype) {
  auto buffer = std::make_unique<Py_buffer>();
  const int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj.ptr(), buffer.get(), flags) != 0) {
    PyErr_Clear();
    if (writable && PyObject_GetBuffer(obj.ptr(), buffer.get(), PyBUF_STRIDES | PyBUF_FORMAT) == 0) {
      PyBuffer_Release(buffer.get());
      throw InvalidArgument(fmt::format("{} is read-only: tbcoll writes the result there (pass a writable array)", what));
    }
    PyErr_Clear();
    throw InvalidArgument(fmt::format("{}: cannot read it as a buffer", what));
  }
  // From here the Py_buffer is released by the capsule.
  py::capsule owner(buffer.get(), [](void* p) {
    auto* b = static_cast<Py_buffer*>(p);
    PyBuffer_Release(b);
    delete b;
  });
  Py_buffer* b = buffer.release();
  if (!PyBuffer_IsContiguous(b, 'C')) {
    throw InvalidArgument(fmt::format(
        "{} is not C-contiguous (a strided or transposed view): tbcoll reads and writes contiguous memory; pass a "
        "contiguous copy (numpy.ascontiguousarray)",
        what));
  }
  const size_t itemsize = static_cast<size_t>(b->itemsize);
  const std::string format = b->format ? b->format : "B";
  View view;
  view.data = b->buf;
  view.count = itemsize == 0 ? 0 : static_cast<size_t>(b->len) / itemsize;
  view.owner = std::move(owner);
  return finish(std::move(view), what, itemsize, "format '" + format + "'", dtype, dtype_of_format(format, itemsize));
}

View from_dlpack(const py::handle& obj, const char* what, std::optional<DataType> dtype) {
  py::object capsule;
  try {
    capsule = obj.attr("__dlpack__")();
  } catch (const py::error_already_set& error) {
    throw InvalidArgument(fmt::format("{}: cannot export it through DLPack: {}", what, error.what()));
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) {
    PyErr_Clear();
    throw InvalidArgument(fmt::format("{}: __dlpack__ did not return a DLPack tensor capsule", what));
  }
  // The capsule, not renamed, frees the tensor when it goes: it is the owner.
  const DLTensor& t = managed->dl_tensor;
  if (t.device.device_type != 1 && t.device.device_type != 3) {
    throw InvalidArgument(fmt::format("{} lives on a device (DLPack device type {}), not in CPU memory: move it to the "
                                      "CPU first",
                                      what, t.device.device_type));
  }
  size_t count = 1;
  for (int i = 0; i < t.ndim; ++i) count *= static_cast<size_t>(t.shape[i]);
  if (t.strides != nullptr && count > 0) {
    int64_t expected = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
      if (t.shape[i] != 1 && t.strides[i] != expected) {
        throw InvalidArgument(fmt::format(
            "{} is not contiguous (stride {} in dimension {}, expected {}): pass a contiguous tensor "
            "(.contiguous())",
            what, t.strides[i], i, expected));
      }
      expected *= t.shape[i];
    }
  }
  const size_t itemsize = (t.dtype.bits * t.dtype.lanes + 7u) / 8u;
  View view;
  view.data = static_cast<char*>(t.data) + t.byte_offset;
  view.count = count;
  view.owner = std::move(capsule);
  const std::string declared =
      fmt::format("DLPack type code {} with {} bits x {} lanes", t.dtype.code, t.dtype.bits, t.dtype.lanes);
  return finish(std::move(view), what, itemsize, declared, dtype, dtype_of_dlpack(t.dtype));
}

}  // namespace

View view_of(const py::handle& obj, const char* what, bool writable, std::optional<DataType> dtype) {
  if (obj.is_none()) throw InvalidArgument(fmt::format("{} is None: pass an array", what));
  if (PyObject_CheckBuffer(obj.ptr())) return from_buffer(obj, what, writable, dtype);
  if (py::hasattr(obj, "__dlpack__")) {
    // DLPack 0.x has no read-only flag; a producer exports read-only memory only if it allows writes to it.
    return from_dlpack(obj, what, dtype);
  }
  throw InvalidArgument(fmt::format("{}: a {} has neither the buffer protocol nor __dlpack__ (pass a numpy array, a "
                                    "torch tensor, or another array that has one of them)",
                                    what, std::string(py::str(obj.get_type().attr("__name__")))));
}

DataType dtype_from_python(const py::handle& value) {
  if (py::isinstance<DataType>(value)) return value.cast<DataType>();
  std::string name = py::str(value);
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  if (name == "float") name = "float32";
  if (name == "half") name = "float16";
  if (name == "double") name = "float64";
  if (name == "int") name = "int32";
  if (name == "long") name = "int64";
  return parse_dtype(name);
}

}  // namespace tbcoll::python
