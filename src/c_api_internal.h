// The C API's shared internals: the communicator handle, the exception-to-result-code boundary and the
// reference counting every call that takes a handle goes through (c_api.cc, c_api_group.cc, c_api_extras.cc).
#pragma once

#include <atomic>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tbcoll/tbcoll.h"
#include "tbcoll/tbcoll.hpp"

// A handle outlives its communicator: the communicator goes with the last reference, the few bytes of the handle
// stay for the life of the process, so a call made with it after tbcollCommDestroy or tbcollCommAbort is told so
// instead of reading freed memory.
struct tbcollComm {
  std::optional<tbcoll::Communicator> communicator;
  /// The handle (until tbcollCommDestroy/Abort) plus the C calls running on it and the groups it is in; whoever
  /// drops the last one destroys the communicator, so a destroy or an abort never waits for a call, and never
  /// destroys under one. 0: gone for good (never raised again).
  std::atomic<int> refs{1};
  std::atomic<bool> open{true};        ///< until tbcollCommDestroy/Abort
  std::atomic<bool> finalized{false};  ///< after tbcollCommFinalize
  std::atomic<int> failure{tbcollSuccess};  ///< the result of the failure that broke it, as returned through here
  /// Reduction operators made by tbcollRedOpCreatePreMulSum on this communicator: op tbcollNumOps + i is
  /// premul[i] (empty once destroyed).
  struct PreMul {
    tbcollDataType_t dtype;
    unsigned char value[8];        ///< the scalar, read at creation (tbcollScalarHostImmediate)
    const void* pointer = nullptr;  ///< else the scalar's address, read by every call that uses the operator
  };
  std::mutex premul_mutex;
  std::vector<std::optional<PreMul>> premul;
};

namespace tbcoll::c_api {


/// The message of the last error on this thread (tbcollGetLastError).
std::string& last_error();

template <typename Body>
inline tbcollResult_t guarded(Body&& body) {
  try {
    body();
    return tbcollSuccess;
  } catch (const tbcoll::Error& error) {
    last_error() = error.what();
    return error.code();
  } catch (const std::bad_alloc&) {
    last_error() = "out of memory";
    return tbcollSystemError;
  } catch (const std::exception& error) {
    last_error() = error.what();
    return tbcollInternalError;
  } catch (...) {
    last_error() = "unknown exception";
    return tbcollInternalError;
  }
}

// C enums from callers may hold any int (a bad dtype must be reported, not trusted). Reading such a value
// through the C++ enum type is undefined, so the raw bits are copied out instead.
template <typename CEnum>
inline int raw(const CEnum& value) {
  static_assert(sizeof(CEnum) == sizeof(int), "C enums are int-sized");
  int out;
  std::memcpy(&out, &value, sizeof(out));
  return out;
}

inline tbcoll::DataType dtype_of(const tbcollDataType_t& datatype) { return static_cast<tbcoll::DataType>(raw(datatype)); }
inline tbcoll::ReduceOp op_of(const tbcollRedOp_t& op) { return static_cast<tbcoll::ReduceOp>(raw(op)); }

/// A handle for a new communicator (kept for the life of the process: see tbcollComm).
tbcollComm_t new_handle(tbcoll::Communicator&& communicator);

constexpr const char* kGone = "the communicator was destroyed or aborted (tbcollCommDestroy, tbcollCommAbort): "
                              "its handle cannot be used any more";

// Takes a reference, unless the communicator is gone (InvalidUsage).
/// Throws InvalidUsage naming comm unless it is a handle this library gave (destroyed ones included: their few
/// bytes stay), so a garbage pointer is never read. A thread's last good handle is remembered: one compare per call.
void check_known(tbcollComm_t comm);

inline void retain(tbcollComm_t comm) {
  check_known(comm);
  int refs = comm->refs.load(std::memory_order_acquire);
  do {
    if (refs == 0) throw tbcoll::InvalidUsage(kGone);
  } while (!comm->refs.compare_exchange_weak(refs, refs + 1, std::memory_order_acq_rel));
}

inline void release(tbcollComm_t comm) {
  if (comm->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) comm->communicator.reset();
}

// The first failure that broke the communicator, for tbcollCommGetAsyncError.
inline void record_failure(tbcollComm_t comm, tbcollResult_t result) {
  int none = tbcollSuccess;
  comm->failure.compare_exchange_strong(none, result, std::memory_order_acq_rel);
}

// Drops a reference when it goes out of scope.
struct Release {
  tbcollComm_t comm;
  ~Release() { release(comm); }
};

// body(comm's Communicator), holding a reference while it runs: tbcollCommAbort (allowed from another thread) or
// tbcollCommDestroy meanwhile leaves the freeing to the call. Every call that uses a communicator goes through
// here.
// Calls after tbcollCommFinalize are refused, except those that only describe the communicator (finalized_ok).
template <typename Body>
inline auto counted(tbcollComm_t comm, Body&& body, bool finalized_ok = false) -> decltype(body(*comm->communicator)) {
  if (comm == nullptr) throw tbcoll::InvalidArgument("communicator is NULL");
  retain(comm);
  Release leave{comm};
  if (!comm->open.load(std::memory_order_acquire)) throw tbcoll::InvalidUsage(kGone);
  if (!finalized_ok && comm->finalized.load(std::memory_order_acquire)) {
    throw tbcoll::InvalidUsage("the communicator was finalized (tbcollCommFinalize): only tbcollCommDestroy, "
                               "tbcollCommCount, tbcollCommUserRank and tbcollCommGetAsyncError take it now");
  }
  try {
    return body(*comm->communicator);
  } catch (const tbcoll::Error& error) {
    if (comm->communicator->broken()) record_failure(comm, error.code());
    throw;
  }
}

template <typename Body>
inline tbcollResult_t with_comm(tbcollComm_t comm, Body&& body) {
  return guarded([&] { counted(comm, body); });
}

// Drops the handle's own reference, once: a second destroy or abort is refused.
inline void close_handle(tbcollComm_t comm, const char* call) {
  retain(comm);  // InvalidUsage if it is gone
  Release leave{comm};
  if (!comm->open.exchange(false, std::memory_order_acq_rel)) {
    throw tbcoll::InvalidUsage(fmt::format("{}: {}", call, kGone));
  }
}

}  // namespace tbcoll::c_api

namespace tbcoll::c_api {

// Groups (c_api_group.cc). Between tbcollGroupStart and the outermost tbcollGroupEnd a thread records: sends and
// receives go into each communicator's own group (checked as they are recorded), collectives and communicator
// creations wait as closures. tbcollGroupEnd runs, per communicator, the point-to-point calls together and then
// the collectives in the order they were recorded; several communicators (or creations) run on threads of their
// own at once, so one thread may drive the ranks of one job (NCCL's single-process, several-device pattern).

/// True between tbcollGroupStart and the outermost tbcollGroupEnd on this thread.
bool in_group();
/// Throws InvalidUsage when `call` is made inside a group (calls that cannot wait for tbcollGroupEnd).
void refuse_in_group(const char* call);
/// Inside a group: body(comm's Communicator) runs at tbcollGroupEnd; returns false outside one. The group holds a
/// reference to comm until then (InvalidArgument for NULL, InvalidUsage for a destroyed handle, at once).
bool defer_collective(tbcollComm_t comm, std::function<void(tbcoll::Communicator&)> body);
/// Inside a group: *out = a handle for make()'s communicator at tbcollGroupEnd (NULL until then); false outside.
bool defer_init(tbcollComm_t* out, std::function<tbcoll::Communicator()> make);
/// A send or receive on comm inside a group: comm joins the group (its Communicator records until the group ends).
void join_group(tbcollComm_t comm);
/// A communicator destroyed or aborted inside a group on this thread leaves it (its recorded calls go with it).
void leave_group(tbcollComm_t comm);

/// A collective's C entry point: the call at once, or, inside a group, recorded for tbcollGroupEnd. Arguments are
/// captured by value.
template <typename Body>
inline tbcollResult_t collective(tbcollComm_t comm, Body body) {
  return guarded([&] {
    if (defer_collective(comm, body)) return;
    counted(comm, body);
  });
}

}  // namespace tbcoll::c_api

namespace tbcoll::c_api {

// Pre-multiplied sums (c_api_extras.cc).

/// The scalar of an operator tbcollRedOpCreatePreMulSum made on comm, its bytes as of now.
struct PreMulScalar {
  unsigned char value[8];
};
/// Nothing for a built-in operator; the scalar of one made on comm for datatype; InvalidArgument for any other.
std::optional<PreMulScalar> premul_of(tbcollComm_t comm, int op, tbcoll::DataType dtype);
/// The reductions of the C API: built-in operators as the C++ API has them; a pre-multiplied sum scales this
/// rank's input (into recv where the call writes it whole, else into a buffer of its own) and sums.
/// op is the C operator's value, read as an int (a C enum may hold any value).
void all_reduce(tbcollComm_t comm, tbcoll::Communicator& c, const void* send, void* recv, size_t count,
                tbcoll::DataType dtype, int op);
void reduce(tbcollComm_t comm, tbcoll::Communicator& c, const void* send, void* recv, size_t count,
            tbcoll::DataType dtype, int op, int root);
void reduce_scatter(tbcollComm_t comm, tbcoll::Communicator& c, const void* send, void* recv, size_t recvcount,
                    tbcoll::DataType dtype, int op);

}  // namespace tbcoll::c_api
