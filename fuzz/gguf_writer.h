// A minimal GGUF (v3) writer for the fuzz targets and their seeds: metadata (u32, f32, string, string and numeric
// arrays) and F32/F16/Q8_0 tensors, laid out as examples/tp_inference/gguf.h reads them (alignment 32).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tbcoll_fuzz {

class GgufWriter {
 public:
  void u32(const std::string& key, uint32_t value) { kv(key, 4, &value, sizeof(value)); }
  void f32(const std::string& key, float value) { kv(key, 6, &value, sizeof(value)); }
  void str(const std::string& key, const std::string& value) {
    key_header(key, 8);
    put_string(meta_, value);
    ++n_kv_;
  }
  void strings(const std::string& key, const std::vector<std::string>& values) {
    key_header(key, 9);
    put(meta_, uint32_t{8});
    put(meta_, uint64_t{values.size()});
    for (const std::string& v : values) put_string(meta_, v);
    ++n_kv_;
  }
  void floats(const std::string& key, const std::vector<float>& values) { array(key, 6, values); }
  void ints(const std::string& key, const std::vector<int32_t>& values) { array(key, 5, values); }

  /// A tensor of ggml type (0 F32, 1 F16, 8 Q8_0) with dims innermost first and its bytes as given.
  void tensor(const std::string& name, uint32_t type, const std::vector<uint64_t>& dims, const std::string& bytes) {
    put_string(infos_, name);
    put(infos_, static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) put(infos_, d);
    put(infos_, type);
    while (data_.size() % 32 != 0) data_.push_back('\0');
    put(infos_, uint64_t{data_.size()});
    data_ += bytes;
    ++n_tensors_;
  }

  std::string file() const {
    std::string out;
    put(out, uint32_t{0x46554747});
    put(out, uint32_t{3});
    put(out, n_tensors_);
    put(out, n_kv_);
    out += meta_;
    out += infos_;
    while (out.size() % 32 != 0) out.push_back('\0');
    return out + data_;
  }

 private:
  template <typename T>
  static void put(std::string& out, T value) {
    out.append(reinterpret_cast<const char*>(&value), sizeof(value));
  }
  static void put_string(std::string& out, const std::string& s) {
    put(out, uint64_t{s.size()});
    out += s;
  }
  void key_header(const std::string& key, uint32_t type) {
    put_string(meta_, key);
    put(meta_, type);
  }
  void kv(const std::string& key, uint32_t type, const void* value, size_t bytes) {
    key_header(key, type);
    meta_.append(static_cast<const char*>(value), bytes);
    ++n_kv_;
  }
  template <typename T>
  void array(const std::string& key, uint32_t element_type, const std::vector<T>& values) {
    key_header(key, 9);
    put(meta_, element_type);
    put(meta_, uint64_t{values.size()});
    for (T v : values) put(meta_, v);
    ++n_kv_;
  }

  std::string meta_, infos_, data_;
  uint64_t n_kv_ = 0, n_tensors_ = 0;
};

/// A file the GGUF reader can map: the targets write each input there (GgufFile takes a path).
class ScratchFile {
 public:
  ScratchFile();
  ~ScratchFile();
  /// Replaces the file's content; returns its path.
  const std::string& write(const void* data, size_t size);

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace tbcoll_fuzz
