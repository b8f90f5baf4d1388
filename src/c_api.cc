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
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "common/env.h"
#include "common/time.h"
#include "tbcoll/tbcoll.h"
#include "tbcoll/tbcoll.hpp"
#include "c_api_handles.h"
#include "c_api_internal.h"
#include "communicator.h"

namespace {

using namespace tbcoll::c_api;

// Every handle ever made, by address (for lookups), so none is freed (and leak checkers see them held).
std::mutex handles_mutex;
std::unordered_map<const tbcollComm*, std::unique_ptr<tbcollComm>> handles;

}  // namespace

namespace tbcoll::c_api {

std::string& last_error() {
  thread_local std::string message;
  return message;
}

tbcollComm_t new_handle(tbcoll::Communicator&& communicator) {
  auto handle = std::make_unique<tbcollComm>();
  handle->communicator.emplace(std::move(communicator));
  tbcollComm_t made = handle.get();
  std::lock_guard<std::mutex> lock(handles_mutex);
  handles.emplace(made, std::move(handle));
  return made;
}

void check_known(tbcollComm_t comm) {
  thread_local tbcollComm_t last_known = nullptr;
  if (comm == last_known) return;
  {
    std::lock_guard<std::mutex> lock(handles_mutex);
    if (handles.count(comm) == 0) {
      throw tbcoll::InvalidUsage(fmt::format("communicator handle {} is not one this library gave (tbcollCommInitRank, "
                                             "tbcollCommSplit, ...): a garbage or foreign pointer",
                                             static_cast<const void*>(comm)));
    }
  }
  last_known = comm;
}

}  // namespace tbcoll::c_api

namespace {

// Never destroyed: a handle may be used (wrongly) while the process exits.
tbcoll::c_api::LiveHandles& registrations() {
  static auto* live = new tbcoll::c_api::LiveHandles("registration handle");
  return *live;
}
// A communicator's registrations end with it, as NCCL's do: tbcollCommDeregister then has no handle to take.
void end_registrations(tbcollComm_t comm) {
  for (const void* handle : registrations().take_all(comm)) {
    delete static_cast<tbcoll::MemoryRegistration*>(const_cast<void*>(handle));
  }
}

tbcoll::c_api::LiveHandles& requests() {
  static auto* live = new tbcoll::c_api::LiveHandles("request");
  return *live;
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
  return tbcollCommInitRankConfig(comm, nranks, comm_id, rank, nullptr);  // the environment's settings
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
    end_registrations(comm);
    release(comm);  // destroyed now, or by the last call or group still using it
  });
}

tbcollResult_t tbcollCommAbort(tbcollComm_t comm) {
  return guarded([&] {
    if (comm == nullptr) return;
    close_handle(comm, "tbcollCommAbort");
    leave_group(comm);
    end_registrations(comm);
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
    counted(comm, [](tbcoll::Communicator&) {}, /*finalized_ok=*/true);  // destroyed: its registrations ended
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

const char* tbcollGetLastError(tbcollComm_t) { return last_error().c_str(); }

tbcollResult_t tbcollAllReduce(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                               tbcollRedOp_t op, tbcollComm_t comm) {
  const tbcoll::DataType dtype = dtype_of(datatype);  // captured as ints: a C enum may hold any value
  const int op_value = raw(op);
  return collective(comm, [=](tbcoll::Communicator& c) {
    all_reduce(comm, c, sendbuff, recvbuff, count, dtype, op_value);
  });
}

tbcollResult_t tbcollAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, tbcollDataType_t datatype,
                               tbcollComm_t comm) {
  const tbcoll::DataType dtype = dtype_of(datatype);  // captured as the C++ enum: any int is one
  return collective(comm, [=](tbcoll::Communicator& c) {
    c.all_gather(sendbuff, recvbuff, sendcount, dtype);
  });
}

tbcollResult_t tbcollReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, tbcollDataType_t datatype,
                                   tbcollRedOp_t op, tbcollComm_t comm) {
  const tbcoll::DataType dtype = dtype_of(datatype);  // captured as ints: a C enum may hold any value
  const int op_value = raw(op);
  return collective(comm, [=](tbcoll::Communicator& c) {
    reduce_scatter(comm, c, sendbuff, recvbuff, recvcount, dtype, op_value);
  });
}

tbcollResult_t tbcollReduce(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                            tbcollRedOp_t op, int root, tbcollComm_t comm) {
  const tbcoll::DataType dtype = dtype_of(datatype);  // captured as ints: a C enum may hold any value
  const int op_value = raw(op);
  return collective(comm, [=](tbcoll::Communicator& c) {
    reduce(comm, c, sendbuff, recvbuff, count, dtype, op_value, root);
  });
}

tbcollResult_t tbcollBroadcast(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                               int root, tbcollComm_t comm) {
  const tbcoll::DataType dtype = dtype_of(datatype);  // captured as the C++ enum: any int is one
  return collective(comm, [=](tbcoll::Communicator& c) {
    c.broadcast(sendbuff, recvbuff, count, dtype, root);
  });
}

tbcollResult_t tbcollBcast(void* buff, size_t count, tbcollDataType_t datatype, int root, tbcollComm_t comm) {
  const tbcoll::DataType dtype = dtype_of(datatype);  // captured as the C++ enum: any int is one
  return collective(comm, [=](tbcoll::Communicator& c) { c.broadcast(buff, buff, count, dtype, root); });
}

tbcollResult_t tbcollBarrier(tbcollComm_t comm) {
  return collective(comm, [=](tbcoll::Communicator& c) {
    c.barrier();
  });
}

tbcollResult_t tbcollAllToAll(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                              tbcollComm_t comm) {
  const tbcoll::DataType dtype = dtype_of(datatype);  // captured as the C++ enum: any int is one
  return collective(comm, [=](tbcoll::Communicator& c) {
    c.all_to_all(sendbuff, recvbuff, count, dtype);
  });
}

tbcollResult_t tbcollAllToAllv(const void* sendbuff, void* recvbuff, const size_t sendcounts[], const size_t sdispls[],
                               const size_t recvcounts[], const size_t rdispls[], tbcollDataType_t datatype,
                               tbcollComm_t comm) {
  if (!in_group()) {
    return with_comm(comm, [&](tbcoll::Communicator& c) {
      c.all_to_allv(sendbuff, recvbuff, sendcounts, sdispls, recvcounts, rdispls, dtype_of(datatype));
    });
  }
  // Recorded for tbcollGroupEnd: the arrays are copied (a NULL one stays NULL).
  return guarded([&] {
    const size_t n = static_cast<size_t>(counted(comm, [](tbcoll::Communicator& c) { return c.size(); }));
    auto copy = [n](const size_t* array) {
      return array == nullptr ? std::optional<std::vector<size_t>>() : std::vector<size_t>(array, array + n);
    };
    auto data = [](const std::optional<std::vector<size_t>>& array) { return array ? array->data() : nullptr; };
    const tbcoll::DataType dtype = dtype_of(datatype);  // captured as the C++ enum: any int is one
    defer_collective(comm, [=, sc = copy(sendcounts), sd = copy(sdispls), rc = copy(recvcounts),
                            rd = copy(rdispls)](tbcoll::Communicator& c) {
      c.all_to_allv(sendbuff, recvbuff, data(sc), data(sd), data(rc), data(rd), dtype);
    });
  });
}

tbcollResult_t tbcollGather(const void* sendbuff, void* recvbuff, size_t sendcount, tbcollDataType_t datatype,
                            int root, tbcollComm_t comm) {
  const tbcoll::DataType dtype = dtype_of(datatype);  // captured as the C++ enum: any int is one
  return collective(comm, [=](tbcoll::Communicator& c) {
    c.gather(sendbuff, recvbuff, sendcount, dtype, root);
  });
}

tbcollResult_t tbcollScatter(const void* sendbuff, void* recvbuff, size_t recvcount, tbcollDataType_t datatype,
                             int root, tbcollComm_t comm) {
  const tbcoll::DataType dtype = dtype_of(datatype);  // captured as the C++ enum: any int is one
  return collective(comm, [=](tbcoll::Communicator& c) {
    c.scatter(sendbuff, recvbuff, recvcount, dtype, root);
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
    refuse_in_group("an asynchronous call");
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
