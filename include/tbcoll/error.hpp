// C++ error types of tbcoll. Every error the library raises is a tbcoll::Error; the C API maps them to
// tbcollResult_t through code(). Messages name the component, rank, peer and operation.
#pragma once

#include <stdexcept>
#include <string>

#include "tbcoll/error.h"
#include "tbcoll/export.h"

namespace tbcoll {

/// Base of every error thrown by tbcoll.
class TBCOLL_API Error : public std::runtime_error {
 public:
  Error(tbcollResult_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  tbcollResult_t code() const noexcept { return code_; }

 private:
  tbcollResult_t code_;
};

/// A bad argument (null buffer, count overflow, dtype/op/peer/root out of range).
class TBCOLL_API InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& what) : Error(tbcollInvalidArgument, what) {}
};

/// Misuse: ranks disagree on a collective, or the communicator is broken or aborted.
class TBCOLL_API InvalidUsage : public Error {
 public:
  explicit InvalidUsage(const std::string& what) : Error(tbcollInvalidUsage, what) {}
};

/// A blocking call passed its deadline.
class TBCOLL_API TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& what) : Error(tbcollTimeout, what) {}
};

/// A system call or I/O failed: connection refused or reset, peer closed, short read.
class TBCOLL_API IoError : public Error {
 public:
  explicit IoError(const std::string& what) : Error(tbcollSystemError, what) {}
};

/// A peer reported a failure or sent something that violates the protocol.
class TBCOLL_API RemoteError : public Error {
 public:
  explicit RemoteError(const std::string& what) : Error(tbcollRemoteError, what) {}
};

/// A message arrived whose tag, signature or size differs from what this rank expected: the ranks called
/// different collectives, counts or dtypes. Carries the raw values so the caller can describe them.
class TBCOLL_API MismatchError : public Error {
 public:
  MismatchError(const std::string& what, int peer, unsigned long long expected_meta, unsigned long long got_meta,
                unsigned long long expected_bytes, unsigned long long got_bytes)
      : Error(tbcollInvalidUsage, what),
        peer_(peer),
        expected_meta_(expected_meta),
        got_meta_(got_meta),
        expected_bytes_(expected_bytes),
        got_bytes_(got_bytes) {}
  int peer() const noexcept { return peer_; }
  unsigned long long expected_meta() const noexcept { return expected_meta_; }
  unsigned long long got_meta() const noexcept { return got_meta_; }
  unsigned long long expected_bytes() const noexcept { return expected_bytes_; }
  unsigned long long got_bytes() const noexcept { return got_bytes_; }

 private:
  int peer_;
  unsigned long long expected_meta_, got_meta_, expected_bytes_, got_bytes_;
};

}  // namespace tbcoll
