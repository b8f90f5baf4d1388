// Memory the ibverbs transport and the RDMA diagnostics register: aligned to a 16 KiB page and sized in whole
// pages, as MLX and llama.cpp allocate theirs (posix_memalign at the page size; Apple silicon's pages are 16 KiB,
// and Apple's provider is not known to take less). 16 KiB is a multiple of every other system's page too.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "tbcoll/error.hpp"

namespace tbcoll::ibverbs {

constexpr size_t kRegistrationPage = 16384;

/// Bytes rounded up to whole registration pages (at least one).
constexpr size_t whole_pages(size_t bytes) {
  return std::max<size_t>(1, (bytes + kRegistrationPage - 1) / kRegistrationPage) * kRegistrationPage;
}

/// A zeroed, page-aligned allocation of whole pages, freed with the object. Movable, not copyable.
class RegisteredMemory {
 public:
  RegisteredMemory() = default;
  explicit RegisteredMemory(size_t bytes) : bytes_(whole_pages(bytes)) {
    const long system_page = sysconf(_SC_PAGESIZE);
    const size_t alignment = std::max<size_t>(kRegistrationPage, system_page > 0 ? static_cast<size_t>(system_page) : 0);
    void* memory = nullptr;
    if (posix_memalign(&memory, alignment, bytes_) != 0 || memory == nullptr) {
      throw IoError("[ibverbs] cannot allocate " + std::to_string(bytes_) + " B of page-aligned memory to register");
    }
    std::memset(memory, 0, bytes_);
    data_ = static_cast<uint8_t*>(memory);
  }
  ~RegisteredMemory() { free(data_); }
  RegisteredMemory(RegisteredMemory&& other) noexcept : data_(other.data_), bytes_(other.bytes_) {
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  RegisteredMemory& operator=(RegisteredMemory&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  RegisteredMemory(const RegisteredMemory&) = delete;
  RegisteredMemory& operator=(const RegisteredMemory&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tbcoll::ibverbs
