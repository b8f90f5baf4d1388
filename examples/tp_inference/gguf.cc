// GGUF reader: a bounds-checked cursor over the mapping; every size read from the file is checked against what is
// left before it is used, so a truncated or corrupt file fails with a message instead of reading out of bounds.
#include "gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

namespace tp_inference {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;
// Metadata arrays hold at most this many elements: the largest real ones (vocabularies, BPE merges) hold a few
// hundred thousand, and an element costs more in memory than in the file (a double per byte of a uint8 array),
// so a corrupt count must not get to size an allocation on its own.
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 24;
// Tensor infos reserved up front at most; more are appended as they are read (and validated).
constexpr uint64_t kReserveTensors = 4096;
constexpr uint64_t kQ8Block = 32;
constexpr uint64_t kQ8BlockBytes = 2 + kQ8Block;

std::string to_hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Bounds-checked little-endian cursor. `what` names the item being read for error messages.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* base, uint64_t size) : path_(path), base_(base), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  void need(uint64_t n, const std::string& what) const {
    if (n > left()) {
      throw GgufError("gguf: " + path_ + ": file truncated: " + what + " needs " + std::to_string(n) +
                      " bytes at offset " + std::to_string(pos_) + " but the file is " + std::to_string(size_) +
                      " bytes");
    }
  }
  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const std::string& what) {
    const uint64_t len = read<uint64_t>(what + " (length)");
    need(len, what);
    std::string s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }
  void skip(uint64_t n, const std::string& what) {
    need(n, what);
    pos_ += n;
  }

 private:
  const std::string& path_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

uint64_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8: case GgufValueType::kInt8: case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16: case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32: case GgufValueType::kInt32: case GgufValueType::kFloat32: return 4;
    case GgufValueType::kUint64: case GgufValueType::kInt64: case GgufValueType::kFloat64: return 8;
    default: return 0;
  }
}

// Reads one numeric scalar of type t; integer results go to *integer too.
double read_number(Cursor& c, GgufValueType t, int64_t* integer, const std::string& what) {
  switch (t) {
    case GgufValueType::kUint8: return static_cast<double>(*integer = c.read<uint8_t>(what));
    case GgufValueType::kInt8: return static_cast<double>(*integer = c.read<int8_t>(what));
    case GgufValueType::kBool: return static_cast<double>(*integer = c.read<uint8_t>(what) != 0);
    case GgufValueType::kUint16: return static_cast<double>(*integer = c.read<uint16_t>(what));
    case GgufValueType::kInt16: return static_cast<double>(*integer = c.read<int16_t>(what));
    case GgufValueType::kUint32: return static_cast<double>(*integer = c.read<uint32_t>(what));
    case GgufValueType::kInt32: return static_cast<double>(*integer = c.read<int32_t>(what));
    case GgufValueType::kUint64: {
      const uint64_t v = c.read<uint64_t>(what);
      *integer = v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                               : static_cast<int64_t>(v);
      return static_cast<double>(v);
    }
    case GgufValueType::kInt64: return static_cast<double>(*integer = c.read<int64_t>(what));
    case GgufValueType::kFloat32: {
      const float v = c.read<float>(what);
      *integer = 0;
      return v;
    }
    case GgufValueType::kFloat64: *integer = 0; return c.read<double>(what);
    default: return 0.0;
  }
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return true;
  *out = a * b;
  return false;
}

// Bytes of one row of cols elements; false when that does not fit 64 bits.
bool type_row_bytes(GgmlType type, uint64_t cols, uint64_t* out) {
  switch (type) {
    case GgmlType::kF32: return !mul_overflows(cols, 4, out);
    case GgmlType::kF16: return !mul_overflows(cols, 2, out);
    case GgmlType::kQ8_0: return !mul_overflows(cols / kQ8Block, kQ8BlockBytes, out);
  }
  *out = 0;
  return true;
}

}  // namespace

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::kUint8: case GgufValueType::kInt8: case GgufValueType::kUint16: case GgufValueType::kInt16:
    case GgufValueType::kUint32: case GgufValueType::kInt32: case GgufValueType::kUint64: case GgufValueType::kInt64:
    case GgufValueType::kBool:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_number() const {
  return is_integer() || type == GgufValueType::kFloat32 || type == GgufValueType::kFloat64;
}

uint64_t GgufTensor::rows() const {
  uint64_t r = 1;
  for (size_t i = 1; i < dims.size(); ++i) r *= dims[i];
  return r;
}

std::string ggml_type_name(uint32_t type) {
  static const char* const kNames[] = {"F32",  "F16",  "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0",
                                       "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"};
  if (type < sizeof(kNames) / sizeof(kNames[0])) return kNames[type];
  if (type == 30) return "BF16";
  return "type " + std::to_string(type);
}

float f16_to_f32(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000) << 16;
  uint32_t exponent = (half >> 10) & 0x1f;
  uint32_t mantissa = half & 0x3ff;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000 | (mantissa << 13);  // inf / nan
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal half: normalise
    exponent = 113;
    while ((mantissa & 0x400) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

GgufFile::GgufFile(const std::string& path) : path_(path) {
  // Non-blocking: opening a FIFO for reading would otherwise wait for a writer, forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw GgufError("gguf: cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw GgufError("gguf: cannot stat " + path + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw GgufError("gguf: " + path + " is not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ < 4) {
    ::close(fd);
    throw GgufError("gguf: " + path + ": file truncated: " + std::to_string(size_) +
                    " bytes is too short for a GGUF header");
  }
  void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (map == MAP_FAILED) throw GgufError("gguf: cannot mmap " + path + ": " + std::strerror(err));
  base_ = static_cast<const uint8_t*>(map);
  try {
    parse();
  } catch (...) {
    ::munmap(const_cast<uint8_t*>(base_), size_);
    throw;
  }
}

GgufFile::~GgufFile() { ::munmap(const_cast<uint8_t*>(base_), size_); }

void GgufFile::parse() {
  Cursor c(path_, base_, size_);
  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kGgufMagic) {
    throw GgufError("gguf: " + path_ + ": not a GGUF file (magic " + to_hex(magic) + ", expected " +
                    to_hex(kGgufMagic) + " \"GGUF\")");
  }
  version_ = c.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3) {
    throw GgufError("gguf: " + path_ + ": unsupported GGUF version " + std::to_string(version_) + " (need 2 or 3)");
  }
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Each kv needs at least 8+4 bytes and each tensor info 8+4+4+8: reject absurd counts before looping.
  if (n_kv > c.left() / 12 || n_tensors > c.left() / 24) {
    throw GgufError("gguf: " + path_ + ": header claims " + std::to_string(n_tensors) + " tensors and " +
                    std::to_string(n_kv) + " metadata entries, more than a " + std::to_string(size_) +
                    "-byte file can hold (truncated or corrupt)");
  }

  for (uint64_t i = 0; i < n_kv; ++i) {
    const std::string key = c.read_string("metadata key " + std::to_string(i));
    const std::string what = "metadata '" + key + "'";
    GgufValue v;
    v.type = static_cast<GgufValueType>(c.read<uint32_t>(what + " type"));
    if (v.type == GgufValueType::kString) {
      v.str = c.read_string(what);
    } else if (v.type == GgufValueType::kArray) {
      v.array_type = static_cast<GgufValueType>(c.read<uint32_t>(what + " element type"));
      v.count = c.read<uint64_t>(what + " element count");
      if (v.count > kMaxArrayElements) {
        throw GgufError("gguf: " + path_ + ": " + what + " claims " + std::to_string(v.count) +
                        " elements, more than this reader accepts (" + std::to_string(kMaxArrayElements) +
                        "; corrupt?)");
      }
      if (v.array_type == GgufValueType::kString) {
        // Each string takes at least its 8-byte length: more than the rest of the file can hold is corrupt.
        if (v.count > c.left() / 8) {
          throw GgufError("gguf: " + path_ + ": " + what + " claims " + std::to_string(v.count) +
                          " strings, more than the rest of the file can hold (truncated or corrupt)");
        }
        v.strings.reserve(static_cast<size_t>(std::min<uint64_t>(v.count, 1 << 16)));
        for (uint64_t j = 0; j < v.count; ++j) v.strings.push_back(c.read_string(what));
      } else if (scalar_size(v.array_type) != 0) {
        const uint64_t elem = scalar_size(v.array_type);
        if (v.count > c.left() / elem) c.need(c.left() + 1, what + " (" + std::to_string(v.count) + " elements)");
        v.numbers.reserve(static_cast<size_t>(v.count));  // <= kMaxArrayElements, and in the file
        int64_t ignored = 0;
        for (uint64_t j = 0; j < v.count; ++j) v.numbers.push_back(read_number(c, v.array_type, &ignored, what));
      } else {
        throw GgufError("gguf: " + path_ + ": " + what + " has unsupported array element type " +
                        std::to_string(static_cast<uint32_t>(v.array_type)));
      }
    } else if (scalar_size(v.type) != 0) {
      v.number = read_number(c, v.type, &v.integer, what);
    } else {
      throw GgufError("gguf: " + path_ + ": " + what + " has unknown value type " +
                      std::to_string(static_cast<uint32_t>(v.type)));
    }
    if (!kv_.emplace(key, std::move(v)).second) throw GgufError("gguf: " + path_ + ": duplicate " + what);
  }

  uint64_t alignment = kDefaultAlignment;
  if (const GgufValue* a = find("general.alignment")) {
    if (!a->is_integer() || a->integer <= 0 || (a->integer & (a->integer - 1)) != 0) {
      throw GgufError("gguf: " + path_ + ": general.alignment must be a power of two");
    }
    alignment = static_cast<uint64_t>(a->integer);
  }

  tensors_.reserve(static_cast<size_t>(std::min(n_tensors, kReserveTensors)));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = c.read_string("tensor info " + std::to_string(i) + " name");
    const std::string what = "tensor '" + t.name + "'";
    const uint32_t n_dims = c.read<uint32_t>(what + " dim count");
    if (n_dims == 0 || n_dims > kMaxDims) {
      throw GgufError("gguf: " + path_ + ": " + what + " has " + std::to_string(n_dims) + " dims (1.." +
                      std::to_string(kMaxDims) + " allowed)");
    }
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim = c.read<uint64_t>(what + " dims");
      if (dim == 0 || mul_overflows(n_elements, dim, &n_elements)) {
        throw GgufError("gguf: " + path_ + ": " + what + " has an invalid dimension " + std::to_string(dim));
      }
      t.dims.push_back(dim);
    }
    const uint32_t type = c.read<uint32_t>(what + " type");
    if (type != 0 && type != 1 && type != 8) {
      throw GgufError("gguf: " + path_ + ": " + what + " has unsupported type " + ggml_type_name(type) +
                      " (this engine reads F32, F16 and Q8_0)");
    }
    t.type = static_cast<GgmlType>(type);
    if (t.type == GgmlType::kQ8_0 && t.dims[0] % kQ8Block != 0) {
      throw GgufError("gguf: " + path_ + ": " + what + " is Q8_0 but its row length " + std::to_string(t.dims[0]) +
                      " is not a multiple of 32");
    }
    t.offset = c.read<uint64_t>(what + " offset");
    if (t.offset % alignment != 0) {
      throw GgufError("gguf: " + path_ + ": " + what + " offset " + std::to_string(t.offset) +
                      " is not aligned to " + std::to_string(alignment));
    }
    if (!type_row_bytes(t.type, t.dims[0], &t.row_bytes) ||
        mul_overflows(t.row_bytes, n_elements / t.dims[0], &t.n_bytes)) {
      throw GgufError("gguf: " + path_ + ": " + what + " is too large");
    }
    if (tensor_index_.count(t.name) != 0) throw GgufError("gguf: " + path_ + ": duplicate " + what);
    tensor_index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }

  const uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
  if (data_start > size_ && !tensors_.empty()) {
    throw GgufError("gguf: " + path_ + ": file truncated: tensor data would start at offset " +
                    std::to_string(data_start) + " but the file is " + std::to_string(size_) + " bytes");
  }
  for (GgufTensor& t : tensors_) {
    const uint64_t avail = size_ - data_start;
    if (t.offset > avail || t.n_bytes > avail - t.offset) {
      // (Offset and size apart: their sum, the end, may not fit in 64 bits.)
      throw GgufError("gguf: " + path_ + ": tensor '" + t.name + "' out of bounds: " + std::to_string(t.n_bytes) +
                      " bytes at offset " + std::to_string(t.offset) + " of the data section, which holds " +
                      std::to_string(avail) + " bytes (truncated or corrupt)");
    }
    t.data = base_ + data_start + t.offset;
  }
  // Tensors own disjoint bytes. Shared or overlapping data would let a small file describe any number of
  // matrices, each copied out (and dequantized) on load: memory without bound.
  std::vector<const GgufTensor*> by_offset;
  for (const GgufTensor& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensor& before = *by_offset[i - 1];
    const GgufTensor& after = *by_offset[i];
    if (after.offset < before.offset + before.n_bytes) {
      throw GgufError("gguf: " + path_ + ": tensors '" + before.name + "' and '" + after.name +
                      "' overlap (data at offsets " + std::to_string(before.offset) + " and " +
                      std::to_string(after.offset) + "; corrupt file)");
    }
  }
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) throw GgufError("gguf: " + path_ + ": missing metadata '" + key + "'");
  if (!v->is_integer()) throw GgufError("gguf: " + path_ + ": metadata '" + key + "' is not an integer");
  return v->integer;
}

int64_t GgufFile::get_int(const std::string& key, int64_t fallback) const {
  return find(key) == nullptr ? fallback : get_int(key);
}

int GgufFile::get_int_in(const std::string& key, int low, int high) const {
  const int64_t v = get_int(key);
  if (v < low || v > high) {
    throw GgufError("gguf: " + path_ + ": metadata '" + key + "' is " + std::to_string(v) + ", outside [" +
                    std::to_string(low) + ", " + std::to_string(high) + "]");
  }
  return static_cast<int>(v);
}

int GgufFile::get_int_in(const std::string& key, int fallback, int low, int high) const {
  return find(key) == nullptr ? fallback : get_int_in(key, low, high);
}

double GgufFile::get_number(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) throw GgufError("gguf: " + path_ + ": missing metadata '" + key + "'");
  if (!v->is_number()) throw GgufError("gguf: " + path_ + ": metadata '" + key + "' is not a number");
  return v->number;
}

double GgufFile::get_number(const std::string& key, double fallback) const {
  return find(key) == nullptr ? fallback : get_number(key);
}

const std::string& GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) throw GgufError("gguf: " + path_ + ": missing metadata '" + key + "'");
  if (v->type != GgufValueType::kString) {
    throw GgufError("gguf: " + path_ + ": metadata '" + key + "' is not a string");
  }
  return v->str;
}

const GgufValue& GgufFile::get_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) throw GgufError("gguf: " + path_ + ": missing metadata '" + key + "'");
  if (v->type != GgufValueType::kArray) throw GgufError("gguf: " + path_ + ": metadata '" + key + "' is not an array");
  return *v;
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(const std::string& name, const std::vector<uint64_t>& dims) const {
  const GgufTensor* t = find_tensor(name);
  if (t == nullptr) throw GgufError("gguf: " + path_ + ": missing tensor '" + name + "'");
  if (t->dims != dims) {
    auto fmt = [](const std::vector<uint64_t>& d) {
      std::string s = "[";
      for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
      return s + "]";
    };
    throw GgufError("gguf: " + path_ + ": tensor '" + name + "' has shape " + fmt(t->dims) + ", expected " +
                    fmt(dims));
  }
  return *t;
}

void GgufFile::read_row(const GgufTensor& t, uint64_t row, uint64_t col_begin, uint64_t col_end, float* out) {
  const uint8_t* p = t.data + row * t.row_bytes;
  switch (t.type) {
    case GgmlType::kF32:
      std::memcpy(out, p + col_begin * 4, (col_end - col_begin) * 4);
      break;
    case GgmlType::kF16:
      for (uint64_t j = col_begin; j < col_end; ++j) {
        uint16_t h;
        std::memcpy(&h, p + j * 2, 2);
        *out++ = f16_to_f32(h);
      }
      break;
    case GgmlType::kQ8_0:
      for (uint64_t j = col_begin; j < col_end; ++j) {
        const uint8_t* block = p + (j / kQ8Block) * kQ8BlockBytes;
        uint16_t h;
        std::memcpy(&h, block, 2);
        *out++ = f16_to_f32(h) * static_cast<float>(static_cast<int8_t>(block[2 + j % kQ8Block]));
      }
      break;
  }
}

}  // namespace tp_inference
