// GGUF (v2/v3) reader for the tp_inference example: the file is mmapped once; metadata is parsed into plain values
// and every tensor's shape, type, offset and size is validated against the file before anything reads it.
//
//   file:  "GGUF" u32 version | u64 n_tensors | u64 n_kv | kv pairs | tensor infos | pad to alignment | data
//   kv:    string key | u32 value type | value (arrays: u32 elem type | u64 count | elems)
//   info:  string name | u32 n_dims | u64 dims[n_dims] (innermost first) | u32 ggml type | u64 offset into data
//
// Supported tensor types: F32, F16 and Q8_0 (blocks of 32 int8 with one f16 scale). Anything else is rejected at
// open time with the tensor's name, so a model never half-loads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace tp_inference {

/// Every problem with a model file: I/O, truncation, bad magic, bad shapes, unsupported types, missing keys.
class GgufError : public std::runtime_error {
 public:
  explicit GgufError(const std::string& what) : std::runtime_error(what) {}
};

/// ggml tensor types this reader understands (values as in ggml.h).
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kQ8_0 = 8 };

/// GGUF metadata value types (values as in the GGUF spec).
enum class GgufValueType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6, kBool = 7,
  kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};

/// One metadata value. Scalars fill the matching field; arrays fill `strings` (string arrays) or `numbers`
/// (every numeric or bool array, converted to double, which is exact for all GGUF numeric types but 64-bit ints
/// above 2^53).
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  GgufValueType array_type = GgufValueType::kUint8;  // element type when type == kArray
  uint64_t count = 0;                                // element count when type == kArray
  int64_t integer = 0;                               // every integer and bool scalar
  double number = 0.0;                               // every numeric scalar (integers too)
  std::string str;
  std::vector<std::string> strings;
  std::vector<double> numbers;

  bool is_integer() const;
  bool is_number() const;
};

/// A tensor's description; `data` points into the mapping (valid while the GgufFile lives).
struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<uint64_t> dims;  // innermost first: dims[0] is the row length
  uint64_t offset = 0;         // relative to the data section
  uint64_t n_bytes = 0;
  uint64_t row_bytes = 0;
  const uint8_t* data = nullptr;

  uint64_t cols() const { return dims.empty() ? 1 : dims[0]; }
  /// Product of all dims but the innermost.
  uint64_t rows() const;
};

/// Name of a ggml type for messages ("F32", "Q4_K", "type 99").
std::string ggml_type_name(uint32_t type);
/// IEEE half to float, exact, no hardware support needed.
float f16_to_f32(uint16_t half);

class GgufFile {
 public:
  /// Maps and validates the whole file; throws GgufError naming the file and the problem.
  explicit GgufFile(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return size_; }

  /// nullptr when the key is absent.
  const GgufValue* find(const std::string& key) const;
  /// Typed getters: throw GgufError when the key is missing or has the wrong type.
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t fallback) const;
  /// An int in [low, high]: a value outside (say, 2^32 + 8 where 8 was meant) is an error, never truncated.
  int get_int_in(const std::string& key, int low, int high) const;
  int get_int_in(const std::string& key, int fallback, int low, int high) const;
  double get_number(const std::string& key) const;
  double get_number(const std::string& key, double fallback) const;
  const std::string& get_string(const std::string& key) const;
  const GgufValue& get_array(const std::string& key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  /// nullptr when absent.
  const GgufTensor* find_tensor(const std::string& name) const;
  /// Throws when absent or when its dims differ from `dims` (innermost first).
  const GgufTensor& tensor(const std::string& name, const std::vector<uint64_t>& dims) const;

  /// Converts columns [col_begin, col_end) of one row to float. Q8_0 needs the whole block, so any range works.
  static void read_row(const GgufTensor& t, uint64_t row, uint64_t col_begin, uint64_t col_end, float* out);

 private:
  void parse();

  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace tp_inference
