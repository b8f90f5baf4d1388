// The C API: the only place where exceptions become result codes.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/env.h"
#include "common/time.h"
#include "tbcoll/tbcoll.h"
#include "tbcoll/tbcoll.hpp"
#include "c_api_handles.h"
#include "communicator.h"

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
};

namespace {

thread_local std::string last_error;

template <typename Body>
tbcollResult_t guarded(Body&& body) {
  try {
    body();
    return tbcollSuccess;
  } catch (const tbcoll::Error& error) {
    last_error = error.what();
    return error.code();
  } catch (const std::bad_alloc&) {
    last_error = "out of memory";
    return tbcollSystemError;
  } catch (const std::exception& error) {
    last_error = error.what();
    return tbcollInternalError;
  } catch (...) {
    last_error = "unknown exception";
    return tbcollInternalError;
  }
}

// C enums from callers may hold any int (a bad dtype must be reported, not trusted). Reading such a value
// through the C++ enum type is undefined, so the raw bits are copied out instead.
template <typename CEnum>
int raw(const CEnum& value) {
  static_assert(sizeof(CEnum) == sizeof(int), "C enums are int-sized");
  int out;
  std::memcpy(&out, &value, sizeof(out));
  return out;
}

tbcoll::DataType dtype_of(const tbcollDataType_t& datatype) { return static_cast<tbcoll::DataType>(raw(datatype)); }
tbcoll::ReduceOp op_of(const tbcollRedOp_t& op) { return static_cast<tbcoll::ReduceOp>(raw(op)); }

// Every handle ever made, so none is freed (and leak checkers see them held).
std::mutex handles_mutex;
std::vector<std::unique_ptr<tbcollComm>> handles;

tbcollComm_t new_handle(tbcoll::Communicator&& communicator) {
  auto handle = std::make_unique<tbcollComm>();
  handle->communicator.emplace(std::move(communicator));
  std::lock_guard<std::mutex> lock(handles_mutex);
  handles.push_back(std::move(handle));
  return handles.back().get();
}

constexpr const char* kGone = "the communicator was destroyed or aborted (tbcollCommDestroy, tbcollCommAbort): "
                              "its handle cannot be used any more";

// Takes a reference, unless the communicator is gone (InvalidUsage).
void retain(tbcollComm_t comm) {
  int refs = comm->refs.load(std::memory_order_acquire);
  do {
    if (refs == 0) throw tbcoll::InvalidUsage(kGone);
  } while (!comm->refs.compare_exchange_weak(refs, refs + 1, std::memory_order_acq_rel));
}

void release(tbcollComm_t comm) {
  if (comm->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) comm->communicator.reset();
}

// The first failure that broke the communicator, for tbcollCommGetAsyncError.
void record_failure(tbcollComm_t comm, tbcollResult_t result) {
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
auto counted(tbcollComm_t comm, Body&& body, bool finalized_ok = false) -> decltype(body(*comm->communicator)) {
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
tbcollResult_t with_comm(tbcollComm_t comm, Body&& body) {
  return guarded([&] { counted(comm, body); });
}

// Drops the handle's own reference, once: a second destroy or abort is refused.
void close_handle(tbcollComm_t comm, const char* call) {
  retain(comm);  // InvalidUsage if it is gone
  Release leave{comm};
  if (!comm->open.exchange(false, std::memory_order_acq_rel)) {
    throw tbcoll::InvalidUsage(fmt::format("{}: {}", call, kGone));
  }
}

// Groups span every communicator this thread uses between tbcollGroupStart and tbcollGroupEnd.
thread_local int c_group_depth = 0;

// Never destroyed: a handle may be used (wrongly) while the process exits.
tbcoll::c_api::LiveHandles& registrations() {
  static auto* live = new tbcoll::c_api::LiveHandles("registration handle");
  return *live;
}
tbcoll::c_api::LiveHandles& requests() {
  static auto* live = new tbcoll::c_api::LiveHandles("request");
  return *live;
}
thread_local std::vector<tbcollComm_t> c_group_comms;

// Groups take send and recv only: a collective inside one is refused (on every rank alike, whatever came first).
void refuse_in_group(const char* call) {
  if (c_group_depth > 0) {
    throw tbcoll::InvalidUsage(fmt::format("{} inside tbcollGroupStart/End: groups take send and recv only", call));
  }
}

// A communicator in this thread's group holds a reference until the group ends (or it leaves the group), so
// tbcollCommAbort or tbcollCommDestroy from another thread does not free it while tbcollGroupEnd still has to
// reach it.
void join_group(tbcollComm_t comm) {
  if (c_group_depth == 0 || comm == nullptr) return;
  for (tbcollComm_t seen : c_group_comms) {
    if (seen == comm) return;
  }
  comm->communicator->group_start();
  retain(comm);
  c_group_comms.push_back(comm);
}

// A communicator destroyed or aborted inside a group, on the group's thread, leaves it (its recorded operations go
// with it).
void leave_group(tbcollComm_t comm) {
  auto at = std::find(c_group_comms.begin(), c_group_comms.end(), comm);
  if (at == c_group_comms.end()) return;
  c_group_comms.erase(at);
  release(comm);
}

}  // namespace

extern "C" {

tbcollResult_t tbcollGetVersion(int* version) {
  return guarded([&] {
    if (version == nullptr) throw tbcoll::InvalidArgument("version pointer is NULL");
    *version = 100;  // 0.1.0
  });
}

tbcollResult_t tbcollGetUniqueId(tbcollUniqueId* unique_id) {
  return guarded([&] {
    if (unique_id == nullptr) throw tbcoll::InvalidArgument("uniqueId pointer is NULL");
    const std::string text = tbcoll::UniqueId::create().to_string();
    std::memset(unique_id->internal, 0, sizeof(unique_id->internal));
    std::memcpy(unique_id->internal, text.data(), text.size());
  });
}

tbcollResult_t tbcollCommInitRank(tbcollComm_t* comm, int nranks, tbcollUniqueId comm_id, int rank) {
  return guarded([&] {
    if (comm == nullptr) throw tbcoll::InvalidArgument("comm pointer is NULL");
    *comm = nullptr;
    const tbcoll::UniqueId id = tbcoll::UniqueId::from_string(
        std::string(comm_id.internal, strnlen(comm_id.internal, sizeof(comm_id.internal))));
    if (nranks < 1) throw tbcoll::InvalidArgument(fmt::format("nranks {} must be at least 1", nranks));
    if (rank < 0 || rank >= nranks) {
      throw tbcoll::InvalidArgument(fmt::format("rank {} out of range for nranks {}", rank, nranks));
    }
    *comm = new_handle(tbcoll::Communicator::init(id, rank, nranks));
  });
}

tbcollResult_t tbcollCommInitFromEnv(tbcollComm_t* comm) {
  return guarded([&] {
    if (comm == nullptr) throw tbcoll::InvalidArgument("comm pointer is NULL");
    *comm = nullptr;
    *comm = new_handle(tbcoll::Communicator::init(tbcoll::Config::from_env()));
  });
}

tbcollResult_t tbcollCommSplit(tbcollComm_t comm, int color, int key, tbcollComm_t* newcomm) {
  return guarded([&] {
    if (newcomm == nullptr) throw tbcoll::InvalidArgument("newcomm pointer is NULL");
    *newcomm = nullptr;
    refuse_in_group("tbcollCommSplit");
    std::optional<tbcoll::Communicator> part =
        counted(comm, [&](tbcoll::Communicator& c) { return c.split(color, key); });
    if (part) *newcomm = new_handle(std::move(*part));
  });
}

tbcollResult_t tbcollCommDestroy(tbcollComm_t comm) {
  return guarded([&] {
    if (comm == nullptr) return;
    close_handle(comm, "tbcollCommDestroy");
    leave_group(comm);
    release(comm);  // destroyed now, or by the last call or group still using it
  });
}

tbcollResult_t tbcollCommAbort(tbcollComm_t comm) {
  return guarded([&] {
    if (comm == nullptr) return;
    close_handle(comm, "tbcollCommAbort");
    leave_group(comm);
    comm->communicator->abort();  // calls running on other threads fail fast now
    release(comm);
  });
}

tbcollResult_t tbcollCommFinalize(tbcollComm_t comm) {
  return with_comm(comm, [&](tbcoll::Communicator& c) {
    refuse_in_group("tbcollCommFinalize");
    c.barrier();  // after the queued calls: a blocking call waits for them first
    comm->finalized.store(true, std::memory_order_release);
  });
}

tbcollResult_t tbcollCommGetAsyncError(tbcollComm_t comm, tbcollResult_t* async_error) {
  return guarded([&] {
    if (async_error == nullptr) throw tbcoll::InvalidArgument("asyncError pointer is NULL");
    *async_error = tbcollSuccess;
    const bool broken = counted(comm, [](tbcoll::Communicator& c) { return c.broken(); }, /*finalized_ok=*/true);
    const int failure = comm->failure.load(std::memory_order_acquire);
    if (broken) *async_error = failure != tbcollSuccess ? static_cast<tbcollResult_t>(failure) : tbcollInvalidUsage;
  });
}

tbcollResult_t tbcollCommCount(const tbcollComm_t comm, int* count) {
  return guarded([&] {
    if (count == nullptr) throw tbcoll::InvalidArgument("count pointer is NULL");
    *count = counted(comm, [](tbcoll::Communicator& c) { return c.size(); }, /*finalized_ok=*/true);
  });
}

tbcollResult_t tbcollCommRegister(const tbcollComm_t comm, void* buff, size_t size, void** handle) {
  return guarded([&] {
    if (handle == nullptr) throw tbcoll::InvalidArgument("handle pointer is NULL");
    *handle = nullptr;
    auto registration = std::make_unique<tbcoll::MemoryRegistration>(
        counted(comm, [&](tbcoll::Communicator& c) { return c.register_memory(buff, size); }));
    registrations().add(registration.get(), comm);
    *handle = registration.release();
  });
}

tbcollResult_t tbcollCommDeregister(const tbcollComm_t comm, void* handle) {
  return guarded([&] {
    if (comm == nullptr) throw tbcoll::InvalidArgument("communicator is NULL");
    if (handle == nullptr) throw tbcoll::InvalidArgument("handle is NULL (not one tbcollCommRegister gave)");
    registrations().take(handle, comm);
    delete static_cast<tbcoll::MemoryRegistration*>(handle);
  });
}

tbcollResult_t tbcollCommUserRank(const tbcollComm_t comm, int* rank) {
  return guarded([&] {
    if (rank == nullptr) throw tbcoll::InvalidArgument("rank pointer is NULL");
    *rank = counted(comm, [](tbcoll::Communicator& c) { return c.rank(); }, /*finalized_ok=*/true);
  });
}

const char* tbcollGetErrorString(tbcollResult_t result) {
  switch (raw(result)) {
    case tbcollSuccess: return "no error";
    case tbcollUnhandledError: return "unhandled error";
    case tbcollSystemError: return "system or I/O error (peer gone, connection failed)";
    case tbcollInternalError: return "internal error";
    case tbcollInvalidArgument: return "invalid argument";
    case tbcollInvalidUsage: return "invalid usage (ranks disagree, or the communicator is broken)";
    case tbcollRemoteError: return "remote error";
    case tbcollTimeout: return "timed out";
    case tbcollInProgress: return "operation in progress";
    default: return "unknown result code";
  }
}

const char* tbcollGetLastError(tbcollComm_t) { return last_error.c_str(); }

tbcollResult_t tbcollAllReduce(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                               tbcollRedOp_t op, tbcollComm_t comm) {
  return with_comm(comm, [&](tbcoll::Communicator& c) {
    refuse_in_group("tbcollAllReduce");
    c.all_reduce(sendbuff, recvbuff, count, dtype_of(datatype), op_of(op));
  });
}

tbcollResult_t tbcollAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, tbcollDataType_t datatype,
                               tbcollComm_t comm) {
  return with_comm(comm, [&](tbcoll::Communicator& c) {
    refuse_in_group("tbcollAllGather");
    c.all_gather(sendbuff, recvbuff, sendcount, dtype_of(datatype));
  });
}

tbcollResult_t tbcollReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, tbcollDataType_t datatype,
                                   tbcollRedOp_t op, tbcollComm_t comm) {
  return with_comm(comm, [&](tbcoll::Communicator& c) {
    refuse_in_group("tbcollReduceScatter");
    c.reduce_scatter(sendbuff, recvbuff, recvcount, dtype_of(datatype), op_of(op));
  });
}

tbcollResult_t tbcollReduce(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                            tbcollRedOp_t op, int root, tbcollComm_t comm) {
  return with_comm(comm, [&](tbcoll::Communicator& c) {
    refuse_in_group("tbcollReduce");
    c.reduce(sendbuff, recvbuff, count, dtype_of(datatype), op_of(op), root);
  });
}

tbcollResult_t tbcollBroadcast(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                               int root, tbcollComm_t comm) {
  return with_comm(comm, [&](tbcoll::Communicator& c) {
    refuse_in_group("tbcollBroadcast");
    c.broadcast(sendbuff, recvbuff, count, dtype_of(datatype), root);
  });
}

tbcollResult_t tbcollBcast(void* buff, size_t count, tbcollDataType_t datatype, int root, tbcollComm_t comm) {
  return tbcollBroadcast(buff, buff, count, datatype, root, comm);
}

tbcollResult_t tbcollBarrier(tbcollComm_t comm) {
  return with_comm(comm, [&](tbcoll::Communicator& c) {
    refuse_in_group("tbcollBarrier");
    c.barrier();
  });
}

tbcollResult_t tbcollAllToAll(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                              tbcollComm_t comm) {
  return with_comm(comm, [&](tbcoll::Communicator& c) {
    refuse_in_group("tbcollAllToAll");
    c.all_to_all(sendbuff, recvbuff, count, dtype_of(datatype));
  });
}

tbcollResult_t tbcollAllToAllv(const void* sendbuff, void* recvbuff, const size_t sendcounts[], const size_t sdispls[],
                               const size_t recvcounts[], const size_t rdispls[], tbcollDataType_t datatype,
                               tbcollComm_t comm) {
  return with_comm(comm, [&](tbcoll::Communicator& c) {
    refuse_in_group("tbcollAllToAllv");
    c.all_to_allv(sendbuff, recvbuff, sendcounts, sdispls, recvcounts, rdispls, dtype_of(datatype));
  });
}

tbcollResult_t tbcollGather(const void* sendbuff, void* recvbuff, size_t sendcount, tbcollDataType_t datatype,
                            int root, tbcollComm_t comm) {
  return with_comm(comm, [&](tbcoll::Communicator& c) {
    refuse_in_group("tbcollGather");
    c.gather(sendbuff, recvbuff, sendcount, dtype_of(datatype), root);
  });
}

tbcollResult_t tbcollScatter(const void* sendbuff, void* recvbuff, size_t recvcount, tbcollDataType_t datatype,
                             int root, tbcollComm_t comm) {
  return with_comm(comm, [&](tbcoll::Communicator& c) {
    refuse_in_group("tbcollScatter");
    c.scatter(sendbuff, recvbuff, recvcount, dtype_of(datatype), root);
  });
}

// Asynchronous calls: a request owns the Work of one queued call.
}  // extern "C"

struct tbcollRequest {
  tbcoll::Work work;
  tbcollComm_t comm = nullptr;  ///< the handle it was queued on (handles are never freed)
};

namespace {

template <typename Start>
tbcollResult_t start_async(tbcollRequest_t* request, tbcollComm_t comm, Start&& start) {
  return guarded([&] {
    if (request == nullptr) throw tbcoll::InvalidArgument("request pointer is NULL");
    *request = nullptr;
    if (c_group_depth > 0) {
      throw tbcoll::InvalidUsage("asynchronous call inside tbcollGroupStart/End: groups take send and recv only");
    }
    auto handle = std::make_unique<tbcollRequest>();
    handle->work = counted(comm, start);
    handle->comm = comm;
    requests().add(handle.get(), comm);
    *request = handle.release();
  });
}

// A live request's work (looked up first: a freed or foreign request is an error, not a dereference).
tbcoll::Work& work_of(tbcollRequest_t request) {
  requests().check(request);
  return request->work;
}

// A queued call that failed broke its communicator: tbcollCommGetAsyncError reports its result from then on.
template <typename Body>
tbcollResult_t on_request(tbcollRequest_t request, Body&& body) {
  tbcollComm_t comm = nullptr;
  const tbcollResult_t result = guarded([&] {
    comm = requests().check(request);
    body();
  });
  // A bad argument of this call itself (a NULL pointer), or a request that is not live, says nothing about the
  // communicator.
  if (result != tbcollSuccess && result != tbcollInvalidArgument && comm != nullptr) record_failure(comm, result);
  return result;
}

}  // namespace

extern "C" {

tbcollResult_t tbcollAllReduceAsync(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                                    tbcollRedOp_t op, tbcollComm_t comm, tbcollRequest_t* request) {
  return start_async(request, comm, [&](tbcoll::Communicator& c) {
    return c.all_reduce_async(sendbuff, recvbuff, count, dtype_of(datatype), op_of(op));
  });
}

tbcollResult_t tbcollAllGatherAsync(const void* sendbuff, void* recvbuff, size_t sendcount,
                                    tbcollDataType_t datatype, tbcollComm_t comm, tbcollRequest_t* request) {
  return start_async(request, comm, [&](tbcoll::Communicator& c) {
    return c.all_gather_async(sendbuff, recvbuff, sendcount, dtype_of(datatype));
  });
}

tbcollResult_t tbcollReduceScatterAsync(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        tbcollDataType_t datatype, tbcollRedOp_t op, tbcollComm_t comm,
                                        tbcollRequest_t* request) {
  return start_async(request, comm, [&](tbcoll::Communicator& c) {
    return c.reduce_scatter_async(sendbuff, recvbuff, recvcount, dtype_of(datatype), op_of(op));
  });
}

tbcollResult_t tbcollReduceAsync(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                                 tbcollRedOp_t op, int root, tbcollComm_t comm, tbcollRequest_t* request) {
  return start_async(request, comm, [&](tbcoll::Communicator& c) {
    return c.reduce_async(sendbuff, recvbuff, count, dtype_of(datatype), op_of(op), root);
  });
}

tbcollResult_t tbcollBroadcastAsync(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                                    int root, tbcollComm_t comm, tbcollRequest_t* request) {
  return start_async(request, comm, [&](tbcoll::Communicator& c) {
    return c.broadcast_async(sendbuff, recvbuff, count, dtype_of(datatype), root);
  });
}

tbcollResult_t tbcollAllToAllAsync(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                                   tbcollComm_t comm, tbcollRequest_t* request) {
  return start_async(request, comm, [&](tbcoll::Communicator& c) {
    return c.all_to_all_async(sendbuff, recvbuff, count, dtype_of(datatype));
  });
}

tbcollResult_t tbcollAllToAllvAsync(const void* sendbuff, void* recvbuff, const size_t sendcounts[],
                                    const size_t sdispls[], const size_t recvcounts[], const size_t rdispls[],
                                    tbcollDataType_t datatype, tbcollComm_t comm, tbcollRequest_t* request) {
  return start_async(request, comm, [&](tbcoll::Communicator& c) {
    return c.all_to_allv_async(sendbuff, recvbuff, sendcounts, sdispls, recvcounts, rdispls, dtype_of(datatype));
  });
}

tbcollResult_t tbcollGatherAsync(const void* sendbuff, void* recvbuff, size_t sendcount, tbcollDataType_t datatype,
                                 int root, tbcollComm_t comm, tbcollRequest_t* request) {
  return start_async(request, comm, [&](tbcoll::Communicator& c) {
    return c.gather_async(sendbuff, recvbuff, sendcount, dtype_of(datatype), root);
  });
}

tbcollResult_t tbcollScatterAsync(const void* sendbuff, void* recvbuff, size_t recvcount, tbcollDataType_t datatype,
                                  int root, tbcollComm_t comm, tbcollRequest_t* request) {
  return start_async(request, comm, [&](tbcoll::Communicator& c) {
    return c.scatter_async(sendbuff, recvbuff, recvcount, dtype_of(datatype), root);
  });
}

tbcollResult_t tbcollTest(tbcollRequest_t request, int* done) {
  return on_request(request, [&] {
    if (done == nullptr) throw tbcoll::InvalidArgument("done pointer is NULL");
    *done = 0;
    try {
      *done = work_of(request).test() ? 1 : 0;
    } catch (const tbcoll::Error&) {
      if (request != nullptr) *done = 1;  // finished, with this error
      throw;
    }
  });
}

tbcollResult_t tbcollWait(tbcollRequest_t request) {
  return on_request(request, [&] { work_of(request).wait(); });
}

tbcollResult_t tbcollRequestFree(tbcollRequest_t request) {
  return guarded([&] {
    if (request == nullptr) return;  // as free(NULL)
    requests().take(request);
    delete request;
  });
}


tbcollResult_t tbcollGroupStart(void) {
  return guarded([&] { ++c_group_depth; });
}

tbcollResult_t tbcollGroupEnd(void) {
  return guarded([&] {
    if (c_group_depth == 0) throw tbcoll::InvalidUsage("tbcollGroupEnd without tbcollGroupStart");
    if (--c_group_depth > 0) return;
    std::vector<tbcollComm_t> comms = std::move(c_group_comms);
    c_group_comms.clear();
    // Every communicator leaves the group, even after one failed; the first error is reported.
    std::exception_ptr first;
    for (tbcollComm_t comm : comms) {
      Release leave{comm};  // the reference join_group took
      try {
        comm->communicator->group_end();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  });
}

tbcollResult_t tbcollSend(const void* sendbuff, size_t count, tbcollDataType_t datatype, int peer,
                          tbcollComm_t comm) {
  return with_comm(comm, [&](tbcoll::Communicator& c) {
    join_group(comm);
    c.send(sendbuff, count, dtype_of(datatype), peer);
  });
}

tbcollResult_t tbcollRecv(void* recvbuff, size_t count, tbcollDataType_t datatype, int peer, tbcollComm_t comm) {
  return with_comm(comm, [&](tbcoll::Communicator& c) {
    join_group(comm);
    c.recv(recvbuff, count, dtype_of(datatype), peer);
  });
}

}  // extern "C"
