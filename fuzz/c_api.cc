// Fuzz target: the C API as a careless or hostile caller uses it. The input is a program of calls on a one-rank
// communicator (the job of one, in this process): collectives with any count, dtype, op, root and buffer (a real
// one of the right size, NULL, the first page, or any pointer with a count of zero), registrations of real and
// absurd ranges, deregistrations, requests tested, waited for and freed in any order (twice, garbage), groups left
// open or ended twice, pre-multiplied operators, tbcollMemAlloc/MemFree of anything, splits, destroys and aborts
// followed by more calls. Invariants: no call crashes or trips a sanitizer; every result is a tbcollResult_t; every
// error comes with a message; a destroyed communicator only ever answers InvalidUsage or InvalidArgument.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "tbcoll/tbcoll.h"

namespace {

constexpr size_t kElements = 64;  // every real buffer holds this many elements of the widest dtype
constexpr size_t kWidest = 8;

struct State {
  std::vector<tbcollComm_t> comms;       // live and destroyed ones alike (handles stay valid memory)
  std::vector<bool> open;                // per comm: not yet destroyed or aborted
  std::vector<void*> registrations;      // any handle ever given, freed or not
  std::vector<tbcollRequest_t> requests;  // likewise
  std::vector<void*> allocations;        // tbcollMemAlloc's, freed or not
  std::vector<tbcollRedOp_t> ops;
  int group_depth = 0;
  alignas(16) unsigned char a[kElements * kWidest * 4] = {};  // aligned for every dtype, as real buffers are
  alignas(16) unsigned char b[kElements * kWidest * 4] = {};
};

void check(tbcollResult_t result) {
  FUZZ_CHECK(static_cast<int>(result) >= 0 && static_cast<int>(result) < tbcollNumResults);
  if (result != tbcollSuccess) FUZZ_CHECK(std::string(tbcollGetLastError(nullptr)) != "");
}

template <typename T>
T pick(tbcoll_fuzz::Reader& in, const std::vector<T>& pool, T garbage) {
  const uint8_t at = in.take<uint8_t>();
  return pool.empty() || at >= pool.size() ? garbage : pool[at];
}

// A count: small ones that fit the buffers most of the time, else sizes no buffer has (past 2^47 bytes).
size_t count_of(tbcoll_fuzz::Reader& in) {
  const uint8_t kind = in.take<uint8_t>();
  if (kind < 200) return kind % (kElements + 1);
  if (kind < 230) return (size_t{1} << 45) + in.take<uint32_t>();
  return SIZE_MAX / (1 + in.take<uint8_t>() % 8) - in.take<uint8_t>();
}

// A buffer for count elements: the real one (whenever the count fits it), NULL, the first page, or, with a count
// of zero, any address.
void* buffer(tbcoll_fuzz::Reader& in, unsigned char* real, size_t count) {
  const uint8_t kind = in.take<uint8_t>() % 8;
  if (kind == 0) return nullptr;
  if (kind == 1) return reinterpret_cast<void*>(uintptr_t{0x10});
  if (kind == 2 && count == 0) return reinterpret_cast<void*>(uintptr_t{0xdead0000});
  return count <= kElements ? real : nullptr;
}

void collective(tbcoll_fuzz::Reader& in, State& s, tbcollComm_t comm) {
  const size_t count = count_of(in);
  const auto dtype = static_cast<tbcollDataType_t>(in.take<uint8_t>() % 12);
  const uint8_t op_pick = in.take<uint8_t>();
  const tbcollRedOp_t op = op_pick < 200 ? static_cast<tbcollRedOp_t>(op_pick % 7) : pick(in, s.ops, tbcollSum);
  const int root = in.take<int8_t>() % 3;
  void* send = buffer(in, s.a, count);
  void* recv = in.take<uint8_t>() % 4 == 0 ? send : buffer(in, s.b, count);
  switch (in.take<uint8_t>() % 9) {
    case 0: return check(tbcollAllReduce(send, recv, count, dtype, op, comm));
    case 1: return check(tbcollAllGather(send, recv, count, dtype, comm));
    case 2: return check(tbcollReduceScatter(send, recv, count, dtype, op, comm));
    case 3: return check(tbcollReduce(send, recv, count, dtype, op, root, comm));
    case 4: return check(tbcollBroadcast(send, recv, count, dtype, root, comm));
    case 5: return check(tbcollAllToAll(send, recv, count, dtype, comm));
    case 6: return check(tbcollGather(send, recv, count, dtype, root, comm));
    case 7: return check(tbcollSend(send, count, dtype, in.take<int8_t>() % 2, comm));
    default: return check(tbcollBarrier(comm));
  }
}

void asynchronous(tbcoll_fuzz::Reader& in, State& s, tbcollComm_t comm) {
  const size_t count = count_of(in);
  void* send = buffer(in, s.a, count);
  tbcollRequest_t request = nullptr;
  check(tbcollAllReduceAsync(send, send, count, tbcollFloat32, tbcollSum, comm, &request));
  if (request != nullptr) s.requests.push_back(request);
}

void on_request(tbcoll_fuzz::Reader& in, State& s) {
  int garbage_object = 0;
  tbcollRequest_t request = pick(in, s.requests, reinterpret_cast<tbcollRequest_t>(&garbage_object));
  int done = 0;
  switch (in.take<uint8_t>() % 3) {
    case 0: return check(tbcollTest(request, &done));
    case 1: return check(tbcollWait(request));
    default: return check(tbcollRequestFree(request));
  }
}

void memory(tbcoll_fuzz::Reader& in, State& s, tbcollComm_t comm) {
  int garbage_object = 0;
  switch (in.take<uint8_t>() % 5) {
    case 0: {
      void* handle = nullptr;
      const uint8_t range = in.take<uint8_t>() % 4;
      void* base = range == 0 ? s.a : range == 1 ? reinterpret_cast<void*>(uintptr_t{1}) : s.b + 1;
      const size_t bytes = range == 3 ? SIZE_MAX - in.take<uint8_t>() : 1 + in.take<uint8_t>() % sizeof(s.a);
      check(tbcollCommRegister(comm, base, range == 2 ? bytes % (sizeof(s.b) - 1) + 1 : bytes, &handle));
      if (handle != nullptr) s.registrations.push_back(handle);
      return;
    }
    case 1: return check(tbcollCommDeregister(comm, pick(in, s.registrations, static_cast<void*>(&garbage_object))));
    case 2: {
      void* ptr = nullptr;
      check(tbcollMemAlloc(&ptr, in.take<uint8_t>() < 250 ? in.take<uint16_t>() : SIZE_MAX - in.take<uint8_t>()));
      if (ptr != nullptr) s.allocations.push_back(ptr);
      return;
    }
    case 3: return check(tbcollMemFree(pick(in, s.allocations, static_cast<void*>(&garbage_object))));
    default: {
      alignas(8) unsigned char scalar[8] = {0, 0, 0, 64, 0, 0, 0, 64};  // a value of any dtype's width
      tbcollRedOp_t op = tbcollSum;
      const auto dtype = static_cast<tbcollDataType_t>(in.take<uint8_t>() % 11);
      if (in.take<uint8_t>() % 2 == 0) {
        check(tbcollRedOpCreatePreMulSum(&op, scalar, dtype, tbcollScalarHostImmediate, comm));
        s.ops.push_back(op);
      } else {
        check(tbcollRedOpDestroy(pick(in, s.ops, static_cast<tbcollRedOp_t>(in.take<uint8_t>())), comm));
      }
    }
  }
}

// Communicators: a new one, a split, a destroy or an abort (calls on it go on afterwards).
void lifetime(tbcoll_fuzz::Reader& in, State& s, tbcollComm_t comm) {
  tbcollComm_t made = nullptr;
  switch (in.take<uint8_t>() % 5) {
    case 0: check(tbcollCommInitAll(&made, 1, nullptr)); break;
    case 1: check(tbcollCommSplit(comm, in.take<int8_t>() % 2, 0, &made)); break;
    case 2:
    case 3: {
      const bool destroy = in.take<uint8_t>() % 2 == 0;
      const tbcollResult_t result = destroy ? tbcollCommDestroy(comm) : tbcollCommAbort(comm);
      check(result);
      for (size_t i = 0; i < s.comms.size(); ++i) {
        if (s.comms[i] == comm) {
          FUZZ_CHECK((result == tbcollSuccess) == s.open[i]);
          s.open[i] = false;
        }
      }
      break;
    }
    default: {
      tbcollResult_t state = tbcollSuccess;
      check(tbcollCommGetAsyncError(comm, &state));
    }
  }
  if (made != nullptr) {
    s.comms.push_back(made);
    s.open.push_back(true);
  }
}

// Calls on a destroyed communicator only ever say it is gone (or that an argument is bad).
void closed_answers(State& s, size_t index) {
  if (s.open[index] || s.group_depth > 0) return;
  float x = 1;
  const tbcollResult_t result = tbcollAllReduce(&x, &x, 1, tbcollFloat32, tbcollSum, s.comms[index]);
  FUZZ_CHECK(result == tbcollInvalidUsage || result == tbcollInvalidArgument);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tbcoll_fuzz::Reader in(data, size);
  State s;
  tbcollComm_t first = nullptr;
  check(tbcollCommInitAll(&first, 1, nullptr));
  FUZZ_CHECK(first != nullptr);
  s.comms.push_back(first);
  s.open.push_back(true);
  for (int step = 0; step < 64 && in.left() > 0; ++step) {
    const uint8_t which = in.take<uint8_t>();
    const size_t index = which % s.comms.size();
    const uint8_t which_comm = in.take<uint8_t>();
    static int not_a_communicator = 0;  // a garbage handle: looked up, never read
    tbcollComm_t comm = which_comm < 245   ? s.comms[index]
                        : which_comm < 250 ? reinterpret_cast<tbcollComm_t>(&not_a_communicator)
                                           : nullptr;
    switch (which / 32 % 8) {
      case 0:
      case 1: collective(in, s, comm); break;
      case 2: asynchronous(in, s, comm); break;
      case 3: on_request(in, s); break;
      case 4: memory(in, s, comm); break;
      case 5: lifetime(in, s, comm); break;
      case 6:
        if (in.take<uint8_t>() % 2 == 0) {
          check(tbcollGroupStart());
          ++s.group_depth;
        } else {
          const tbcollResult_t result = tbcollGroupEnd();
          check(result);
          if (s.group_depth > 0) --s.group_depth;
          else FUZZ_CHECK(result == tbcollInvalidUsage);
        }
        break;
      default: closed_answers(s, index);
    }
  }
  // Leave nothing behind for the next input: groups ended, requests and memory freed, communicators destroyed.
  for (; s.group_depth > 0; --s.group_depth) check(tbcollGroupEnd());
  for (tbcollRequest_t request : s.requests) tbcollRequestFree(request);
  for (void* ptr : s.allocations) tbcollMemFree(ptr);
  for (size_t i = 0; i < s.comms.size(); ++i) {
    if (s.open[i]) check(tbcollCommDestroy(s.comms[i]));
  }
  return 0;
}
