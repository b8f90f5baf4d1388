// The C API's NCCL-shaped extras: creation with a config, tbcollCommInitAll, pre-multiplied sums, tbcollMemAlloc
// and the stream check tbcoll/nccl.h uses.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "c_api_internal.h"
#include "call_checks.h"
#include "reduce/reduce.h"
#include "tbcoll/store.hpp"

namespace tbcoll::c_api {
namespace {

// A config must come from TBCOLL_CONFIG_INITIALIZER (NCCL refuses an uninitialised one too) and hold values in range.
void check_config(const tbcollConfig_t& config) {
  if (config.magic != TBCOLL_CONFIG_MAGIC || config.size < sizeof(tbcollConfig_t)) {
    throw InvalidArgument(fmt::format("config (size {}, magic {:#x}) was not made from its initializer "
                                      "(TBCOLL_CONFIG_INITIALIZER, or NCCL_CONFIG_INITIALIZER through tbcoll/nccl.h)",
                                      config.size, config.magic));
  }
  if (config.blocking != TBCOLL_CONFIG_UNDEF_INT && config.blocking != 0 && config.blocking != 1) {
    throw InvalidArgument(fmt::format("config.blocking {} must be 0 or 1", config.blocking));
  }
  if (config.timeoutMs != TBCOLL_CONFIG_UNDEF_INT && config.timeoutMs < 0) {
    throw InvalidArgument(fmt::format("config.timeoutMs {} must be 0 (no deadline) or more", config.timeoutMs));
  }
}

// The environment's settings with the config's on top.
tbcoll::Config settings(const tbcollConfig_t* config) {
  tbcoll::Config out = tbcoll::Config::from_env();
  if (config == nullptr) return out;
  check_config(*config);
  if (config->transport != nullptr) {
    const std::string name = config->transport;
    out.transport = name == "Socket" ? "tcp" : name == "IB" ? "ibverbs" : name;
  }
  if (config->timeoutMs == 0) out.timeout_s = std::numeric_limits<double>::infinity();
  if (config->timeoutMs > 0) out.timeout_s = config->timeoutMs / 1000.0;
  return out;
}

tbcoll::UniqueId id_of(const tbcollUniqueId& comm_id) {
  return tbcoll::UniqueId::from_string(
      std::string(comm_id.internal, strnlen(comm_id.internal, sizeof(comm_id.internal))));
}

// out[i] = in[i] * scalar over count elements of dtype, with the product kernel of the reductions (its integer
// wrap-around and its f16/bf16 rounding), a block of copies of the scalar at a time.
void scale(void* out, const void* in, size_t count, tbcoll::DataType dtype, const unsigned char* scalar) {
  const size_t es = dtype_size(dtype);
  constexpr size_t kBlock = 512;
  alignas(16) unsigned char copies[kBlock * 8];  // read as elements of dtype: aligned for any
  for (size_t i = 0; i < kBlock; ++i) std::memcpy(copies + i * es, scalar, es);
  for (size_t done = 0; done < count; done += kBlock) {
    const size_t n = std::min(kBlock, count - done);
    reduce::apply(static_cast<unsigned char*>(out) + done * es, static_cast<const unsigned char*>(in) + done * es,
                  copies, n, dtype, tbcoll::ReduceOp::kProd);
  }
}

}  // namespace

std::optional<PreMulScalar> premul_of(tbcollComm_t comm, int op, tbcoll::DataType dtype) {
  if (op < tbcollNumOps) return std::nullopt;
  std::lock_guard<std::mutex> lock(comm->premul_mutex);
  const size_t index = static_cast<size_t>(op - tbcollNumOps);
  if (index >= comm->premul.size() || !comm->premul[index]) {
    throw InvalidArgument(fmt::format("reduction operator {} was not made by tbcollRedOpCreatePreMulSum on this "
                                      "communicator, or was destroyed", op));
  }
  const tbcollComm::PreMul& made = *comm->premul[index];
  if (dtype_of(made.dtype) != dtype) {
    throw InvalidArgument(fmt::format("reduction operator {} was made for {}, the call's dtype is {}", op,
                                      to_string(dtype_of(made.dtype)), to_string(dtype)));
  }
  PreMulScalar out{};
  std::memcpy(out.value, made.pointer != nullptr ? made.pointer : made.value, dtype_size(dtype));
  return out;
}

void all_reduce(tbcollComm_t comm, tbcoll::Communicator& c, const void* send, void* recv, size_t count,
                tbcoll::DataType dtype, int op) {
  const std::optional<PreMulScalar> premul = premul_of(comm, op, dtype);
  if (!premul) return c.all_reduce(send, recv, count, dtype, static_cast<tbcoll::ReduceOp>(op));
  // The buffers are checked before the scaling touches them, as the call would check them.
  const size_t bytes = checked_bytes(c.rank(), "all_reduce", count, dtype, 1);
  check_buffer(c.rank(), "all_reduce", "send", send, count);
  check_buffer(c.rank(), "all_reduce", "recv", recv, count);
  check_overlap(c.rank(), "all_reduce", send, bytes, recv, bytes, send == recv, "sendbuff == recvbuff");
  scale(recv, send, count, dtype, premul->value);
  c.all_reduce(recv, recv, count, dtype, tbcoll::ReduceOp::kSum);
}

void reduce(tbcollComm_t comm, tbcoll::Communicator& c, const void* send, void* recv, size_t count,
            tbcoll::DataType dtype, int op, int root) {
  const std::optional<PreMulScalar> premul = premul_of(comm, op, dtype);
  if (!premul) return c.reduce(send, recv, count, dtype, static_cast<tbcoll::ReduceOp>(op), root);
  const size_t bytes = checked_bytes(c.rank(), "reduce", count, dtype, 1);
  check_buffer(c.rank(), "reduce", "send", send, count);
  std::vector<unsigned char> scaled(bytes);
  scale(scaled.data(), send, count, dtype, premul->value);
  c.reduce(scaled.data(), recv, count, dtype, tbcoll::ReduceOp::kSum, root);
}

void reduce_scatter(tbcollComm_t comm, tbcoll::Communicator& c, const void* send, void* recv, size_t recvcount,
                    tbcoll::DataType dtype, int op) {
  const std::optional<PreMulScalar> premul = premul_of(comm, op, dtype);
  if (!premul) return c.reduce_scatter(send, recv, recvcount, dtype, static_cast<tbcoll::ReduceOp>(op));
  const size_t n = static_cast<size_t>(c.size());
  std::vector<unsigned char> scaled(checked_bytes(c.rank(), "reduce_scatter", recvcount, dtype, n));
  check_buffer(c.rank(), "reduce_scatter", "send", send, recvcount * n);
  scale(scaled.data(), send, recvcount * n, dtype, premul->value);
  c.reduce_scatter(scaled.data(), recv, recvcount, dtype, tbcoll::ReduceOp::kSum);
}

}  // namespace tbcoll::c_api

using namespace tbcoll::c_api;

namespace {

std::mutex allocations_mutex;
std::map<void*, size_t> allocations;  // tbcollMemAlloc's live blocks: start -> mapped bytes

}  // namespace

extern "C" {

tbcollResult_t tbcollCommInitRankConfig(tbcollComm_t* comm, int nranks, tbcollUniqueId comm_id, int rank,
                                        const tbcollConfig_t* config) {
  return guarded([&] {
    if (comm == nullptr) throw tbcoll::InvalidArgument("comm pointer is NULL");
    *comm = nullptr;
    const tbcoll::Config base = settings(config);
    const tbcoll::UniqueId id = id_of(comm_id);
    if (nranks < 1) throw tbcoll::InvalidArgument(fmt::format("nranks {} must be at least 1", nranks));
    if (rank < 0 || rank >= nranks) {
      throw tbcoll::InvalidArgument(fmt::format("rank {} out of range for nranks {}", rank, nranks));
    }
    auto make = [id, rank, nranks, base] { return tbcoll::Communicator::init(id, rank, nranks, base); };
    if (defer_init(comm, make)) return;
    *comm = new_handle(make());
  });
}

tbcollResult_t tbcollCommInitAll(tbcollComm_t* comms, int ndev, const int* devlist) {
  return guarded([&] {
    if (comms == nullptr) throw tbcoll::InvalidArgument("comms pointer is NULL");
    if (ndev < 1) throw tbcoll::InvalidArgument(fmt::format("ndev {} must be at least 1", ndev));
    std::set<int> seen;
    for (int i = 0; devlist != nullptr && i < ndev; ++i) {
      if (devlist[i] < 0 || !seen.insert(devlist[i]).second) {
        throw tbcoll::InvalidArgument(fmt::format("devlist[{}] = {}: entries must be distinct and not negative", i,
                                                  devlist[i]));
      }
    }
    refuse_in_group("tbcollCommInitAll");
    std::fill(comms, comms + ndev, nullptr);
    const std::shared_ptr<tbcoll::Store> store = tbcoll::make_in_memory_store();
    std::vector<std::optional<tbcoll::Communicator>> made(static_cast<size_t>(ndev));
    std::vector<std::exception_ptr> errors(made.size());
    auto init = [&](int rank) {
      try {
        tbcoll::Config config = tbcoll::Config::from_env();
        config.rank = rank;
        config.world_size = ndev;
        config.root.clear();
        config.store = store;
        made[static_cast<size_t>(rank)].emplace(tbcoll::Communicator::init(config));
      } catch (...) {
        errors[static_cast<size_t>(rank)] = std::current_exception();
      }
    };
    std::vector<std::thread> threads;
    for (int rank = 1; rank < ndev; ++rank) threads.emplace_back(init, rank);
    init(0);
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& error : errors) {
      if (error) std::rethrow_exception(error);  // the made ones are destroyed with `made`
    }
    for (int rank = 0; rank < ndev; ++rank) comms[rank] = new_handle(std::move(*made[static_cast<size_t>(rank)]));
  });
}

tbcollResult_t tbcollCommSplitConfig(tbcollComm_t comm, int color, int key, tbcollComm_t* newcomm,
                                     const tbcollConfig_t* config) {
  const tbcollResult_t checked = guarded([&] {
    if (newcomm != nullptr) *newcomm = nullptr;
    if (config != nullptr) check_config(*config);
  });
  return checked != tbcollSuccess ? checked : tbcollCommSplit(comm, color, key, newcomm);
}

tbcollResult_t tbcollMemAlloc(void** ptr, size_t size) {
  return guarded([&] {
    if (ptr == nullptr) throw tbcoll::InvalidArgument("ptr is NULL");
    *ptr = nullptr;
    if (size == 0) throw tbcoll::InvalidArgument("size is 0");
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    if (size > (size_t{1} << 47)) {
      throw tbcoll::InvalidArgument(fmt::format("size {} B is more than a process can map (2^47 B)", size));
    }
    const size_t bytes = (size + page - 1) / page * page;
    void* block = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (block == MAP_FAILED) {
      throw tbcoll::IoError(fmt::format("tbcollMemAlloc({} B): mmap failed: {}", size, strerror(errno)));
    }
    std::lock_guard<std::mutex> lock(allocations_mutex);
    allocations[block] = bytes;
    *ptr = block;
  });
}

tbcollResult_t tbcollMemFree(void* ptr) {
  return guarded([&] {
    if (ptr == nullptr) return;
    size_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(allocations_mutex);
      auto it = allocations.find(ptr);
      if (it == allocations.end()) {
        throw tbcoll::InvalidArgument(fmt::format("tbcollMemFree({}): not memory tbcollMemAlloc gave, or freed "
                                                  "already", ptr));
      }
      bytes = it->second;
      allocations.erase(it);
    }
    munmap(ptr, bytes);
  });
}

tbcollResult_t tbcollRedOpCreatePreMulSum(tbcollRedOp_t* op, void* scalar, tbcollDataType_t datatype,
                                          tbcollScalarResidence_t residence, tbcollComm_t comm) {
  return guarded([&] {
    if (op == nullptr) throw tbcoll::InvalidArgument("op pointer is NULL");
    if (scalar == nullptr) throw tbcoll::InvalidArgument("scalar is NULL");
    const int type = raw(datatype);
    if (type < 0 || type >= tbcollNumTypes) throw tbcoll::InvalidArgument(fmt::format("invalid dtype {}", type));
    const int where = raw(residence);
    if (where != tbcollScalarDevice && where != tbcollScalarHostImmediate) {
      throw tbcoll::InvalidArgument(fmt::format("invalid scalar residence {} (tbcollScalarDevice 0 or "
                                                "tbcollScalarHostImmediate 1)", where));
    }
    counted(comm, [&](tbcoll::Communicator&) {
      tbcollComm::PreMul made{datatype, {}, nullptr};
      if (where == tbcollScalarDevice) made.pointer = scalar;
      else std::memcpy(made.value, scalar, tbcoll::dtype_size(dtype_of(datatype)));
      std::lock_guard<std::mutex> lock(comm->premul_mutex);
      auto slot = std::find_if(comm->premul.begin(), comm->premul.end(), [](const auto& p) { return !p; });
      if (slot == comm->premul.end()) slot = comm->premul.insert(slot, std::nullopt);
      *slot = made;
      const int value = tbcollNumOps + static_cast<int>(slot - comm->premul.begin());
      std::memcpy(op, &value, sizeof(value));
    });
  });
}

tbcollResult_t tbcollRedOpDestroy(tbcollRedOp_t op, tbcollComm_t comm) {
  return guarded([&] {
    const int value = raw(op);
    counted(comm, [&](tbcoll::Communicator&) {
      std::lock_guard<std::mutex> lock(comm->premul_mutex);
      const size_t index = static_cast<size_t>(value) - tbcollNumOps;
      if (value < tbcollNumOps || index >= comm->premul.size() || !comm->premul[index]) {
        throw tbcoll::InvalidArgument(fmt::format("tbcollRedOpDestroy: operator {} is {} on this communicator", value,
                                                  value < tbcollNumOps ? "built in, not one to destroy"
                                                                       : "not one tbcollRedOpCreatePreMulSum made"));
      }
      comm->premul[index].reset();
    }, /*finalized_ok=*/true);
  });
}

tbcollResult_t tbcollCheckStream(const void* stream, const char* call) {
  return guarded([&] {
    if (stream != nullptr) {
      throw tbcoll::InvalidArgument(fmt::format(
          "{}: stream {} must be NULL: tbcoll runs on the CPU, and its calls finish before they return",
          call != nullptr ? call : "call", stream));
    }
  });
}

tbcollResult_t tbcollCommSetCallObserver(tbcollComm_t comm, tbcollCallObserver_t observer, void* user) {
  return guarded([&] {
    counted(comm, [&](tbcoll::Communicator& c) {
      if (observer == nullptr) {
        c.set_call_observer(nullptr);
        return;
      }
      c.set_call_observer([observer, user](const tbcoll::CallEvent& e) {
        const tbcollCallEvent_t event{e.phase == tbcoll::CallEvent::Phase::kBegin ? 0 : 1,
                                      e.seq,
                                      e.name,
                                      e.count,
                                      static_cast<tbcollDataType_t>(e.dtype),
                                      static_cast<tbcollRedOp_t>(e.op),
                                      e.root,
                                      e.algorithm,
                                      e.ok ? 1 : 0,
                                      e.seconds};
        observer(&event, user);
      });
    });
  });
}

}  // extern "C"
