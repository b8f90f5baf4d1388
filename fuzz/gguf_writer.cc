#include "gguf_writer.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "fuzz_support.h"

namespace tbcoll_fuzz {

ScratchFile::ScratchFile() {
  const char* dir = std::getenv("TMPDIR");
  std::string pattern = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/tbcoll-fuzz-XXXXXX";
  fd_ = mkstemp(pattern.data());
  FUZZ_CHECK(fd_ >= 0);
  path_ = pattern;
}

ScratchFile::~ScratchFile() {
  close(fd_);
  unlink(path_.c_str());
}

const std::string& ScratchFile::write(const void* data, size_t size) {
  FUZZ_CHECK(ftruncate(fd_, 0) == 0);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd_, static_cast<const char*>(data) + done, size - done, static_cast<off_t>(done));
    FUZZ_CHECK(n > 0);
    done += static_cast<size_t>(n);
  }
  return path_;
}

}  // namespace tbcoll_fuzz
