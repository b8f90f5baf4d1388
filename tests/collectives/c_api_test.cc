// The C API: unique id rendezvous, collectives, result codes and error strings.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tbcoll/tbcoll.h"

extern char** environ;

namespace {

// Records a failed call with the C API's messages.
using Fail = std::function<void(const char* what, tbcollResult_t rc)>;

// Runs body(rank, comm, failure, fail) on n ranks as threads, each with a communicator from one
// tbcollGetUniqueId rendezvous (destroyed after the body), and expects no rank to record a failure (fail() or
// an assignment to `failure`).
void run_c_ranks(int n, const std::function<void(int, tbcollComm_t, std::string&, const Fail&)>& body) {
  tbcollUniqueId id;
  ASSERT_EQ(tbcollGetUniqueId(&id), tbcollSuccess);
  std::vector<std::string> failures(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      std::string& failure = failures[static_cast<size_t>(rank)];
      const Fail fail = [&](const char* what, tbcollResult_t rc) {
        failure = std::string(what) + ": " + tbcollGetErrorString(rc) + ": " + tbcollGetLastError(nullptr);
      };
      tbcollComm_t comm = nullptr;
      tbcollResult_t rc = tbcollCommInitRank(&comm, n, id, rank);
      if (rc != tbcollSuccess) return fail("init", rc);
      body(rank, comm, failure, fail);
      tbcollCommDestroy(comm);
    });
  }
  for (auto& thread : threads) thread.join();
  for (int rank = 0; rank < n; ++rank) EXPECT_EQ(failures[static_cast<size_t>(rank)], "") << "rank " << rank;
}

TEST(CApi, UniqueIdRendezvousAndCollectives) {
  const int n = 3;
  run_c_ranks(n, [&](const int rank, tbcollComm_t comm, std::string& failure, const Fail& fail) {
    tbcollResult_t rc = tbcollSuccess;
    int count = 0, me = -1;
    tbcollCommCount(comm, &count);
    tbcollCommUserRank(comm, &me);
    if (count != n || me != rank) failure = "count/rank wrong";
    std::vector<float> data(1000, static_cast<float>(rank + 1)), sum(1000);
    if ((rc = tbcollAllReduce(data.data(), sum.data(), data.size(), tbcollFloat32, tbcollSum, comm)) != tbcollSuccess) {
      return fail("all_reduce", rc);
    }
    if (sum[999] != 6.0f) failure = "all_reduce result " + std::to_string(sum[999]);
    std::vector<int32_t> all(n * 2);
    int32_t mine[2] = {rank, rank * 10};
    if ((rc = tbcollAllGather(mine, all.data(), 2, tbcollInt32, comm)) != tbcollSuccess) return fail("all_gather", rc);
    for (int r = 0; r < n; ++r) {
      if (all[2 * r] != r || all[2 * r + 1] != r * 10) failure = "all_gather result";
    }
    int64_t value = rank == 2 ? 77 : 0;
    if ((rc = tbcollBcast(&value, 1, tbcollInt64, 2, comm)) != tbcollSuccess) return fail("bcast", rc);
    if (value != 77) failure = "bcast result";
    float blocks[n * 2], mine_rs[2] = {0, 0};
    for (int i = 0; i < n * 2; ++i) blocks[i] = static_cast<float>(i + rank);
    if ((rc = tbcollReduceScatter(blocks, mine_rs, 2, tbcollFloat32, tbcollSum, comm)) != tbcollSuccess) {
      return fail("reduce_scatter", rc);
    }
    if (mine_rs[1] != static_cast<float>(3 * (2 * rank + 1) + 3)) failure = "reduce_scatter result";
    int32_t one = rank + 1, total = 0;
    if ((rc = tbcollReduce(&one, rank == 1 ? &total : nullptr, 1, tbcollInt32, tbcollProd, 1, comm)) != tbcollSuccess) {
      return fail("reduce", rc);
    }
    if (rank == 1 && total != 6) failure = "reduce result " + std::to_string(total);
    if ((rc = tbcollBarrier(comm)) != tbcollSuccess) return fail("barrier", rc);
    if (rank == 0) rc = tbcollSend(&value, 1, tbcollInt64, 1, comm);
    if (rank == 1) rc = tbcollRecv(&value, 1, tbcollInt64, 0, comm);
    if (rc != tbcollSuccess) return fail("send/recv", rc);
    // Bad arguments come back as codes with a message, and the communicator stays usable.
    if (tbcollAllReduce(nullptr, sum.data(), 4, tbcollFloat32, tbcollSum, comm) != tbcollInvalidArgument ||
        std::strstr(tbcollGetLastError(comm), "send buffer is null") == nullptr) {
      failure = std::string("null buffer not reported: ") + tbcollGetLastError(comm);
    }
    if (tbcollAllReduce(data.data(), sum.data(), 4, static_cast<tbcollDataType_t>(99), tbcollSum, comm) !=
        tbcollInvalidArgument) {
      failure = "bad dtype not reported";
    }
    if (tbcollBroadcast(data.data(), sum.data(), 4, tbcollFloat32, n, comm) != tbcollInvalidArgument) {
      failure = "bad root not reported";
    }
    if ((rc = tbcollBarrier(comm)) != tbcollSuccess) return fail("barrier after errors", rc);
  });
}

// Counts whose size no buffer can have (past the 2^47 bytes a process can map) are refused before any pointer
// arithmetic, naming the count, the dtype and the bytes, on roots and non-roots alike; the communicator stays usable.
TEST(CApi, SizesNoBufferCanHaveAreRefused) {
  const int n = 2;
  run_c_ranks(n, [&](const int rank, tbcollComm_t comm, std::string& failure, const Fail& fail) {
    std::vector<uint8_t> buf(64);
    auto refused = [&](const char* what, tbcollResult_t rc, const char* words) {
      if (rc != tbcollInvalidArgument) {
        failure = std::string(what) + ": returned " + std::to_string(static_cast<int>(rc));
      } else if (std::strstr(tbcollGetLastError(comm), words) == nullptr) {
        failure = std::string(what) + ": " + tbcollGetLastError(comm);
      }
    };
    refused("all_reduce 2^46 f32", tbcollAllReduce(buf.data(), buf.data(), size_t{1} << 46, tbcollFloat32, tbcollSum, comm),
            "count 70368744177664 of f32 is 281474976710656 bytes, more than a process can map");
    refused("send SIZE_MAX/8 u8", tbcollSend(buf.data(), SIZE_MAX / 8, tbcollUint8, 1 - rank, comm),
            "more than a process can map");
    refused("broadcast SIZE_MAX/2 u8", tbcollBroadcast(buf.data(), buf.data(), SIZE_MAX / 2, tbcollUint8, 0, comm),
            "more than a process can map");
    refused("gather SIZE_MAX/4 u8", tbcollGather(buf.data(), rank == 0 ? buf.data() + 8 : nullptr, SIZE_MAX / 4,
                                                 tbcollUint8, 0, comm), "count 4611686018427387903 of u8");
    refused("all_gather SIZE_MAX/4 u8", tbcollAllGather(buf.data(), buf.data() + 8, SIZE_MAX / 4, tbcollUint8, comm),
            "count 4611686018427387903 of u8");
    tbcollResult_t rc = tbcollSuccess;
    if ((rc = tbcollBarrier(comm)) != tbcollSuccess) return fail("barrier after the refusals", rc);
  });
}

// Handles freed twice, garbage, or of another communicator: an error naming the handle, never a crash.
TEST(CApi, BadHandlesAreErrorsNotCrashes) {
  const int n = 2;
  run_c_ranks(n, [&](const int rank, tbcollComm_t comm, std::string& failure, const Fail& fail) {
    (void)rank;
    std::vector<float> data(1024, 1.0f), sum(1024);
    int garbage_object = 0;
    void* garbage = &garbage_object;
    void* handle = nullptr;
    tbcollResult_t rc = tbcollSuccess;
    if ((rc = tbcollCommRegister(comm, data.data(), data.size() * sizeof(float), &handle)) != tbcollSuccess) {
      return fail("register", rc);
    }
    if ((rc = tbcollCommDeregister(comm, handle)) != tbcollSuccess) return fail("deregister", rc);
    if (tbcollCommDeregister(comm, handle) != tbcollInvalidUsage ||
        std::strstr(tbcollGetLastError(comm), "is not live: freed already") == nullptr) {
      failure = std::string("second deregister: ") + tbcollGetLastError(comm);
    }
    if (tbcollCommDeregister(comm, garbage) != tbcollInvalidUsage) failure = "garbage registration handle accepted";
    // A garbage communicator pointer is looked up, never read: InvalidUsage naming it (not a crash, nor
    // "finalized").
    float x = 1;
    auto* garbage_comm = reinterpret_cast<tbcollComm_t>(&garbage_object);
    if (tbcollAllReduce(&x, &x, 1, tbcollFloat32, tbcollSum, garbage_comm) != tbcollInvalidUsage ||
        std::strstr(tbcollGetLastError(nullptr), "is not one this library gave") == nullptr) {
      failure = std::string("garbage communicator: ") + tbcollGetLastError(nullptr);
    }
    if (tbcollCommDestroy(reinterpret_cast<tbcollComm_t>(0x1000)) != tbcollInvalidUsage) {
      failure = "destroy of an address that is no handle succeeded";
    }
    // Ranges no mapping can have.
    const uintptr_t near_the_end = UINTPTR_MAX - 4095;
    for (const auto& [base, bytes] : {std::pair<uintptr_t, size_t>{1, 4096},
                                      {reinterpret_cast<uintptr_t>(data.data()), SIZE_MAX},
                                      {near_the_end, 8192}}) {
      handle = nullptr;
      if (tbcollCommRegister(comm, reinterpret_cast<void*>(base), bytes, &handle) != tbcollInvalidArgument ||
          handle != nullptr || std::strstr(tbcollGetLastError(comm), "not a range of mapped memory") == nullptr) {
        failure = "register(" + std::to_string(base) + ", " + std::to_string(bytes) + "): " + tbcollGetLastError(comm);
      }
    }
    tbcollRequest_t request = nullptr;
    if ((rc = tbcollAllReduceAsync(data.data(), sum.data(), data.size(), tbcollFloat32, tbcollSum, comm, &request)) !=
        tbcollSuccess) {
      return fail("all_reduce_async", rc);
    }
    if ((rc = tbcollWait(request)) != tbcollSuccess) return fail("wait", rc);
    if ((rc = tbcollRequestFree(request)) != tbcollSuccess) return fail("free", rc);
    if (tbcollRequestFree(request) != tbcollInvalidUsage) failure = "second free accepted";
    if (tbcollWait(request) != tbcollInvalidUsage) failure = "wait after free accepted";
    int done = 0;
    if (tbcollTest(reinterpret_cast<tbcollRequest_t>(garbage), &done) != tbcollInvalidUsage) failure = "garbage test";
    if (tbcollRequestFree(nullptr) != tbcollSuccess) failure = "free(NULL) refused";
    // The communicator is not broken by any of it.
    if ((rc = tbcollAllReduce(data.data(), sum.data(), data.size(), tbcollFloat32, tbcollSum, comm)) != tbcollSuccess) {
      return fail("all_reduce after the bad handles", rc);
    }
    if (sum[0] != 2.0f) failure = "all_reduce result";
  });
}

TEST(CApi, AsynchronousCallsAndRequests) {
  const int n = 2;
  run_c_ranks(n, [&](const int rank, tbcollComm_t comm, std::string& failure, const Fail& fail) {
    tbcollResult_t rc = tbcollSuccess;
    std::vector<float> data(5000, static_cast<float>(rank + 1)), sum(5000);
    std::vector<int32_t> gathered(2 * n), scattered(3), blocks(3 * n, rank + 1);
    int32_t mine[2] = {rank, -rank};
    int64_t value = rank == 1 ? 9 : 0, product = 0;
    tbcollRequest_t requests[5] = {};
    if ((rc = tbcollAllReduceAsync(data.data(), sum.data(), data.size(), tbcollFloat32, tbcollSum, comm,
                                   &requests[0])) != tbcollSuccess ||
        (rc = tbcollAllGatherAsync(mine, gathered.data(), 2, tbcollInt32, comm, &requests[1])) != tbcollSuccess ||
        (rc = tbcollReduceScatterAsync(blocks.data(), scattered.data(), 3, tbcollInt32, tbcollSum, comm,
                                       &requests[2])) != tbcollSuccess ||
        (rc = tbcollBroadcastAsync(&value, &value, 1, tbcollInt64, 1, comm, &requests[3])) != tbcollSuccess ||
        (rc = tbcollReduceAsync(&value, &product, 1, tbcollInt64, tbcollProd, 0, comm, &requests[4])) !=
            tbcollSuccess) {
      return fail("queueing", rc);
    }
    int done = 0;
    while (done == 0) {  // poll the first one, wait for the others
      if ((rc = tbcollTest(requests[0], &done)) != tbcollSuccess) return fail("test", rc);
    }
    for (tbcollRequest_t request : requests) {
      if ((rc = tbcollWait(request)) != tbcollSuccess) return fail("wait", rc);
      if ((rc = tbcollRequestFree(request)) != tbcollSuccess) return fail("free", rc);
    }
    if (sum[4999] != 3.0f) failure = "all_reduce result " + std::to_string(sum[4999]);
    if (gathered[2] != 1 || gathered[3] != -1) failure = "all_gather result";
    if (scattered[2] != 3) failure = "reduce_scatter result " + std::to_string(scattered[2]);
    if (value != 9) failure = "broadcast result";
    if (rank == 0 && product != 81) failure = "reduce result " + std::to_string(product);
    // An argument error comes back from the call itself, nothing is queued, and the communicator stays usable.
    tbcollRequest_t bad = nullptr;
    if (tbcollAllReduceAsync(nullptr, sum.data(), 4, tbcollFloat32, tbcollSum, comm, &bad) != tbcollInvalidArgument ||
        std::strstr(tbcollGetLastError(comm), "send buffer is null") == nullptr || bad != nullptr) {
      failure = std::string("null buffer not reported by the call: ") + tbcollGetLastError(comm);
    }
    if ((rc = tbcollBarrier(comm)) != tbcollSuccess) return fail("barrier after errors", rc);
  });
  EXPECT_EQ(tbcollAllReduceAsync(nullptr, nullptr, 0, tbcollFloat32, tbcollSum, nullptr, nullptr),
            tbcollInvalidArgument);
  EXPECT_EQ(tbcollWait(nullptr), tbcollInvalidArgument);
  int done = 0;
  EXPECT_EQ(tbcollTest(nullptr, &done), tbcollInvalidArgument);
  EXPECT_EQ(tbcollRequestFree(nullptr), tbcollSuccess) << "freeing NULL is a no-op, like free()";
}

// An observer set through the C API sees each call begin and end with its number and signature; NULL stops it.
TEST(CApi, CallObserverSeesEachCall) {
  struct Seen {
    std::vector<std::string> events;
  };
  run_c_ranks(2, [&](const int rank, tbcollComm_t comm, std::string& failure, const Fail& fail) {
    Seen seen;
    const tbcollCallObserver_t observer = [](const tbcollCallEvent_t* e, void* user) {
      static_cast<Seen*>(user)->events.push_back(std::string(e->phase == 0 ? "begin " : "end ") + e->name + " #" +
                                                 std::to_string(e->seq) + " " + std::to_string(e->count) +
                                                 (e->phase == 1 && e->ok != 1 ? " failed" : ""));
    };
    tbcollResult_t rc = tbcollSuccess;
    if ((rc = tbcollCommSetCallObserver(comm, observer, &seen)) != tbcollSuccess) return fail("observer", rc);
    std::vector<float> x(10, 1.0f);
    if ((rc = tbcollAllReduce(x.data(), x.data(), x.size(), tbcollFloat32, tbcollSum, comm)) != tbcollSuccess) {
      return fail("all_reduce", rc);
    }
    if ((rc = tbcollCommSetCallObserver(comm, nullptr, nullptr)) != tbcollSuccess) return fail("no observer", rc);
    if ((rc = tbcollBarrier(comm)) != tbcollSuccess) return fail("barrier", rc);
    const std::vector<std::string> expected = {"begin all_reduce #1 10", "end all_reduce #1 10"};
    if (seen.events != expected) failure = "rank " + std::to_string(rank) + " saw " + std::to_string(seen.events.size());
  });
  EXPECT_EQ(tbcollCommSetCallObserver(nullptr, nullptr, nullptr), tbcollInvalidArgument);
}

// A communicator's registrations end with it: deregistering one afterwards is InvalidUsage naming the destroyed
// communicator (it returned success), and nothing leaks (the ASan stage checks).
TEST(CApi, RegistrationsEndWithTheirCommunicator) {
  tbcollUniqueId id;
  ASSERT_EQ(tbcollGetUniqueId(&id), tbcollSuccess);
  tbcollComm_t comm = nullptr;
  ASSERT_EQ(tbcollCommInitRank(&comm, 1, id, 0), tbcollSuccess);
  std::vector<float> data(4096);
  void* handle = nullptr;
  ASSERT_EQ(tbcollCommRegister(comm, data.data(), data.size() * sizeof(float), &handle), tbcollSuccess);
  ASSERT_EQ(tbcollCommDestroy(comm), tbcollSuccess);
  EXPECT_EQ(tbcollCommDeregister(comm, handle), tbcollInvalidUsage);
  EXPECT_NE(std::string(tbcollGetLastError(nullptr)).find("destroyed or aborted"), std::string::npos)
      << tbcollGetLastError(nullptr);
}

// As ncclCommRegister/ncclCommDeregister: a handle for any memory (transports with nothing to gain from it take
// none of it), calls from registered memory as from any, and bad arguments named.
TEST(CApi, RegisterAndDeregisterMemory) {
  run_c_ranks(2, [&](const int rank, tbcollComm_t comm, std::string& failure, const Fail& fail) {
    std::vector<float> data(5000, static_cast<float>(rank + 1)), sum(5000);
    void* handle = nullptr;
    tbcollResult_t rc = tbcollCommRegister(comm, data.data(), data.size() * sizeof(float), &handle);
    if (rc != tbcollSuccess) return fail("register", rc);
    if (handle == nullptr) failure = "no handle";
    if ((rc = tbcollAllReduce(data.data(), sum.data(), data.size(), tbcollFloat32, tbcollSum, comm)) != tbcollSuccess) {
      return fail("all_reduce", rc);
    }
    if (sum[4999] != 3.0f) failure = "all_reduce result " + std::to_string(sum[4999]);
    if ((rc = tbcollCommDeregister(comm, handle)) != tbcollSuccess) return fail("deregister", rc);
    void* none = &failure;
    if (tbcollCommRegister(comm, nullptr, 16, &none) != tbcollInvalidArgument || none != nullptr) {
      failure = "a null buffer was registered";
    }
    if (tbcollCommRegister(comm, data.data(), 16, nullptr) != tbcollInvalidArgument) failure = "null handle pointer";
    if (tbcollCommDeregister(comm, nullptr) != tbcollInvalidArgument) failure = "a null handle was deregistered";
  });
}

TEST(CApi, NullArgumentsAndStrings) {
  EXPECT_EQ(tbcollCommInitRank(nullptr, 1, tbcollUniqueId{}, 0), tbcollInvalidArgument);
  EXPECT_EQ(tbcollAllReduce(nullptr, nullptr, 0, tbcollFloat32, tbcollSum, nullptr), tbcollInvalidArgument);
  EXPECT_NE(std::string(tbcollGetLastError(nullptr)).find("NULL"), std::string::npos);
  tbcollComm_t comm = nullptr;
  EXPECT_EQ(tbcollCommInitRank(&comm, 2, tbcollUniqueId{}, 0), tbcollInvalidArgument) << "garbage unique id";
  EXPECT_EQ(comm, nullptr);
  // Rank and size are checked before the store is contacted (this id's store does not exist: reaching for it
  // took the whole timeout, then reported the connection instead of the rank).
  tbcollUniqueId dead{};
  std::snprintf(dead.internal, sizeof(dead.internal), "127.0.0.1:1\ntoken");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(tbcollCommInitRank(&comm, 2, dead, 7), tbcollInvalidArgument);
  EXPECT_NE(std::string(tbcollGetLastError(nullptr)).find("rank 7 out of range for nranks 2"), std::string::npos)
      << tbcollGetLastError(nullptr);
  EXPECT_EQ(tbcollCommInitRank(&comm, 0, dead, 0), tbcollInvalidArgument);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  int version = 0;
  EXPECT_EQ(tbcollGetVersion(&version), tbcollSuccess);
  EXPECT_EQ(version, 100);
  for (int rc = 0; rc < tbcollNumResults; ++rc) {
    EXPECT_GT(std::strlen(tbcollGetErrorString(static_cast<tbcollResult_t>(rc))), 3u);
  }
}

TEST(CApi, SingleRankAndAbort) {
  tbcollUniqueId id;
  ASSERT_EQ(tbcollGetUniqueId(&id), tbcollSuccess);
  tbcollComm_t comm = nullptr;
  ASSERT_EQ(tbcollCommInitRank(&comm, 1, id, 0), tbcollSuccess);
  double x = 1.5, y = 0;
  EXPECT_EQ(tbcollAllReduce(&x, &y, 1, tbcollFloat64, tbcollMax, comm), tbcollSuccess);
  EXPECT_EQ(y, 1.5);
  EXPECT_EQ(tbcollCommAbort(comm), tbcollSuccess);
}

// The watchdog pattern: another thread aborts a call that waits for a peer that never comes. The call fails at
// once, and the communicator is freed only after it has left, never under the running call (an all-reduce, a
// group's send/recv at tbcollGroupEnd, a split).
void abort_while_blocked(const char* what, const std::function<tbcollResult_t(tbcollComm_t)>& call) {
  SCOPED_TRACE(what);
  tbcollUniqueId id;
  ASSERT_EQ(tbcollGetUniqueId(&id), tbcollSuccess);
  std::atomic<bool> aborted{false};
  tbcollResult_t call_rc = tbcollSuccess, abort_rc = tbcollInternalError;
  std::chrono::steady_clock::duration waited{};
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      tbcollComm_t comm = nullptr;
      if (tbcollCommInitRank(&comm, 2, id, rank) != tbcollSuccess) return;
      if (rank == 1) {  // never joins
        while (!aborted.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        tbcollCommDestroy(comm);
        return;
      }
      std::thread watchdog([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        abort_rc = tbcollCommAbort(comm);
        aborted = true;
      });
      auto start = std::chrono::steady_clock::now();
      call_rc = call(comm);
      waited = std::chrono::steady_clock::now() - start;
      watchdog.join();
    });
  }
  for (std::thread& rank : ranks) rank.join();
  EXPECT_EQ(abort_rc, tbcollSuccess);
  EXPECT_NE(call_rc, tbcollSuccess) << "the aborted call reported success";
  EXPECT_LT(waited, std::chrono::seconds(10)) << "the aborted call waited for its deadline";
}

TEST(CApi, AbortFromAnotherThreadEndsTheRunningCallBeforeFreeing) {
  std::vector<float> data(1 << 16, 1.0f);
  abort_while_blocked("all_reduce", [&](tbcollComm_t comm) {
    return tbcollAllReduce(data.data(), data.data(), data.size(), tbcollFloat32, tbcollSum, comm);
  });
  abort_while_blocked("group", [&](tbcollComm_t comm) {
    tbcollGroupStart();
    tbcollRecv(data.data(), data.size(), tbcollFloat32, 1, comm);
    return tbcollGroupEnd();
  });
  abort_while_blocked("split", [&](tbcollComm_t comm) {
    tbcollComm_t child = nullptr;
    return tbcollCommSplit(comm, 0, 0, &child);
  });
}

// A watchdog aborts the communicators of a group while tbcollGroupEnd is blocked in the first one's part: the
// second, idle one must not be freed at once, or tbcollGroupEnd would run its part on freed memory. A group member
// holds a reference until the group ends: both aborts return at once, the group fails fast, and the last
// one to let go frees each communicator.
TEST(CApi, AbortOfAGroupMemberDoesNotFreeItUnderTheGroup) {
  setenv("TBCOLL_TIMEOUT", "20", 1);
  tbcollUniqueId id_a, id_b;
  ASSERT_EQ(tbcollGetUniqueId(&id_a), tbcollSuccess);
  ASSERT_EQ(tbcollGetUniqueId(&id_b), tbcollSuccess);
  tbcollComm_t a = nullptr, a1 = nullptr, b = nullptr;
  std::thread rank0([&] { tbcollCommInitRank(&a, 2, id_a, 0); });
  EXPECT_EQ(tbcollCommInitRank(&a1, 2, id_a, 1), tbcollSuccess);  // rank 1 of A: never sends
  rank0.join();
  EXPECT_EQ(tbcollCommInitRank(&b, 1, id_b, 0), tbcollSuccess);   // B: one rank, sends to itself
  unsetenv("TBCOLL_TIMEOUT");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::vector<float> in(1024), out(1024, 1.0f), self(1024);
  const auto start = std::chrono::steady_clock::now();
  std::thread watchdog([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(tbcollCommAbort(b), tbcollSuccess);  // idle in the group: freed when the group lets go of it
    EXPECT_EQ(tbcollCommAbort(a), tbcollSuccess);  // ends the receive the group waits in
  });
  ASSERT_EQ(tbcollGroupStart(), tbcollSuccess);
  EXPECT_EQ(tbcollRecv(in.data(), in.size(), tbcollFloat32, 1, a), tbcollSuccess);
  EXPECT_EQ(tbcollSend(out.data(), out.size(), tbcollFloat32, 0, b), tbcollSuccess);
  EXPECT_EQ(tbcollRecv(self.data(), self.size(), tbcollFloat32, 0, b), tbcollSuccess);
  EXPECT_NE(tbcollGroupEnd(), tbcollSuccess) << "A's receive never completes";
  watchdog.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5)) << "an abort waited for a deadline";
  EXPECT_EQ(tbcollCommDestroy(a1), tbcollSuccess);
}

// Collectives inside a group are recorded and run at its end; splits and asynchronous calls are refused there.
TEST(CApi, CollectivesInsideAGroupRunAtItsEnd) {
  tbcollUniqueId id;
  ASSERT_EQ(tbcollGetUniqueId(&id), tbcollSuccess);
  tbcollComm_t comm = nullptr;
  ASSERT_EQ(tbcollCommInitRank(&comm, 1, id, 0), tbcollSuccess);
  float x = 1, y = 0;
  ASSERT_EQ(tbcollGroupStart(), tbcollSuccess);
  EXPECT_EQ(tbcollAllReduce(&x, &y, 1, tbcollFloat32, tbcollSum, comm), tbcollSuccess);
  EXPECT_EQ(tbcollBarrier(comm), tbcollSuccess);
  EXPECT_EQ(tbcollBcast(&x, 1, tbcollFloat32, 0, comm), tbcollSuccess);
  EXPECT_EQ(y, 0.0f) << "ran before tbcollGroupEnd";
  tbcollComm_t child = nullptr;
  EXPECT_EQ(tbcollCommSplit(comm, 0, 0, &child), tbcollInvalidUsage);
  EXPECT_NE(std::string(tbcollGetLastError(comm)).find("tbcollCommSplit inside tbcollGroupStart/End"),
            std::string::npos) << tbcollGetLastError(comm);
  tbcollRequest_t request = nullptr;
  EXPECT_EQ(tbcollAllReduceAsync(&x, &x, 1, tbcollFloat32, tbcollSum, comm, &request), tbcollInvalidUsage);
  EXPECT_EQ(tbcollGroupEnd(), tbcollSuccess) << tbcollGetLastError(comm);
  EXPECT_EQ(y, 1.0f);
  EXPECT_EQ(tbcollCommDestroy(comm), tbcollSuccess);
}

// Rank 0's process hosts the store of a unique id. It leaves a split (no colour) and destroys its communicator
// while ranks 1 and 2, in other processes, still need the store for their child's split: the store keeps running
// while they are connected, not stopping with rank 0's communicator.
TEST(CApi, UniqueIdStoreServesOtherProcessesAfterRankZeroLeft) {
  tbcollUniqueId id;
  ASSERT_EQ(tbcollGetUniqueId(&id), tbcollSuccess);
  const std::string text(id.internal, strnlen(id.internal, sizeof(id.internal)));
  std::vector<pid_t> children;
  for (int rank = 1; rank <= 2; ++rank) {
    const std::string rank_text = std::to_string(rank);
    std::vector<char*> argv = {const_cast<char*>(TBCOLL_TEST_PROG_PATH), const_cast<char*>("c_split"),
                               const_cast<char*>(rank_text.c_str()), const_cast<char*>(text.c_str()), nullptr};
    pid_t pid = -1;
    ASSERT_EQ(posix_spawn(&pid, TBCOLL_TEST_PROG_PATH, nullptr, nullptr, argv.data(), environ), 0);
    children.push_back(pid);
  }
  tbcollComm_t comm = nullptr, child = nullptr;
  ASSERT_EQ(tbcollCommInitRank(&comm, 3, id, 0), tbcollSuccess) << tbcollGetLastError(nullptr);
  EXPECT_EQ(tbcollCommSplit(comm, TBCOLL_SPLIT_NOCOLOR, 0, &child), tbcollSuccess) << tbcollGetLastError(comm);
  EXPECT_EQ(child, nullptr);
  EXPECT_EQ(tbcollCommDestroy(comm), tbcollSuccess);
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a rank of the other processes failed";
  }
}

int thread_count() {
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return -1;
  char line[256];
  int threads = -1;
  while (std::fgets(line, sizeof(line), status) != nullptr) {
    if (std::sscanf(line, "Threads: %d", &threads) == 1) break;
  }
  std::fclose(status);
  return threads;
}

// The store server of a unique id stops with the last communicator made from it (else each would keep a thread
// and four descriptors until the process exits).
TEST(CApi, UniqueIdServersStopWithTheirCommunicators) {
  const int before = thread_count();
  for (int round = 0; round < 40; ++round) {
    tbcollUniqueId id;
    ASSERT_EQ(tbcollGetUniqueId(&id), tbcollSuccess);
    tbcollComm_t comm = nullptr;
    ASSERT_EQ(tbcollCommInitRank(&comm, 1, id, 0), tbcollSuccess);
    ASSERT_EQ(tbcollCommDestroy(comm), tbcollSuccess);
  }
  EXPECT_LT(thread_count(), before + 5) << "store servers piled up";
  run_c_ranks(2, [](int, tbcollComm_t comm, std::string&, const Fail& fail) {
    int value = 1;
    tbcollResult_t rc = tbcollAllReduce(&value, &value, 1, tbcollInt32, tbcollSum, comm);
    if (rc != tbcollSuccess) fail("all_reduce", rc);
  });
  EXPECT_LT(thread_count(), before + 5) << "store servers piled up";
}

}  // namespace

namespace {

// NCCL's names for the types, as a port from NCCL writes them: the same values, so the same buffers.
TEST(CApiNcclNames, TypeAliasesAreNcclsValues) {
  static_assert(tbcollChar == tbcollInt8 && tbcollInt == tbcollInt32 && tbcollHalf == tbcollFloat16 &&
                    tbcollFloat == tbcollFloat32 && tbcollDouble == tbcollFloat64,
                "NCCL's aliases");
  // NCCL's numbering (nccl.h): ncclInt8 0 ... ncclBfloat16 9; ncclSum 0 ... ncclAvg 4; results 0-6.
  static_assert(tbcollUint8 == 1 && tbcollUint64 == 5 && tbcollBfloat16 == 9 && tbcollNumTypes == 10, "types");
  static_assert(tbcollMax == 2 && tbcollMin == 3 && tbcollAvg == 4, "ops");
  static_assert(tbcollSystemError == 2 && tbcollInvalidUsage == 5 && tbcollRemoteError == 6, "results");
  tbcollUniqueId id;
  ASSERT_EQ(tbcollGetUniqueId(&id), tbcollSuccess);
  tbcollComm_t comm = nullptr;
  ASSERT_EQ(tbcollCommInitRank(&comm, 1, id, 0), tbcollSuccess);
  float x[3] = {1, 2, 3}, y[3] = {};
  EXPECT_EQ(tbcollAllReduce(x, y, 3, tbcollFloat, tbcollSum, comm), tbcollSuccess);
  EXPECT_EQ(y[2], 3.0f);
  EXPECT_EQ(tbcollCommDestroy(comm), tbcollSuccess);
}

// A handle after tbcollCommAbort or tbcollCommDestroy: every call says so, and none reads freed memory.
TEST(CApiHandles, CallsAfterAbortOrDestroyFailCleanly) {
  for (const bool abort : {true, false}) {
    SCOPED_TRACE(abort ? "abort" : "destroy");
    tbcollUniqueId id;
    ASSERT_EQ(tbcollGetUniqueId(&id), tbcollSuccess);
    tbcollComm_t comm = nullptr;
    ASSERT_EQ(tbcollCommInitRank(&comm, 1, id, 0), tbcollSuccess);
    ASSERT_EQ(abort ? tbcollCommAbort(comm) : tbcollCommDestroy(comm), tbcollSuccess);
    float x = 1, y = 0;
    EXPECT_EQ(tbcollAllReduce(&x, &y, 1, tbcollFloat, tbcollSum, comm), tbcollInvalidUsage);
    EXPECT_NE(std::string(tbcollGetLastError(nullptr)).find("destroyed or aborted"), std::string::npos)
        << tbcollGetLastError(nullptr);
    int count = 0;
    EXPECT_EQ(tbcollCommCount(comm, &count), tbcollInvalidUsage);
    tbcollRequest_t request = nullptr;
    EXPECT_EQ(tbcollAllReduceAsync(&x, &y, 1, tbcollFloat, tbcollSum, comm, &request), tbcollInvalidUsage);
    EXPECT_EQ(request, nullptr);
    tbcollResult_t async_error = tbcollSuccess;
    EXPECT_EQ(tbcollCommGetAsyncError(comm, &async_error), tbcollInvalidUsage);
    EXPECT_EQ(tbcollCommAbort(comm), tbcollInvalidUsage) << "a second abort";
    EXPECT_EQ(tbcollCommDestroy(comm), tbcollInvalidUsage) << "a destroy after it";
  }
}

// Finalize (as ncclCommFinalize): collective, after the queued calls; then only destroy and the queries.
TEST(CApiHandles, FinalizeWaitsForQueuedCallsThenOnlyDestroyFollows) {
  run_c_ranks(2, [&](const int rank, tbcollComm_t comm, std::string& failure, const Fail& fail) {
    std::vector<float> data(4096, static_cast<float>(rank + 1)), sum(4096, 0);
    tbcollRequest_t request = nullptr;
    tbcollResult_t rc = tbcollAllReduceAsync(data.data(), sum.data(), data.size(), tbcollFloat, tbcollSum, comm,
                                             &request);
    if (rc != tbcollSuccess) return fail("all_reduce_async", rc);
    if ((rc = tbcollCommFinalize(comm)) != tbcollSuccess) return fail("finalize", rc);
    if (sum[4095] != 3.0f) failure = "the queued all_reduce had not finished at finalize";
    int done = 0;
    if ((rc = tbcollTest(request, &done)) != tbcollSuccess || done != 1) failure = "request not done";
    tbcollRequestFree(request);
    float x = 1;
    if (tbcollAllReduce(&x, &x, 1, tbcollFloat, tbcollSum, comm) != tbcollInvalidUsage) {
      failure = "a collective after finalize was not refused";
    } else if (std::string(tbcollGetLastError(nullptr)).find("finalized") == std::string::npos) {
      failure = std::string("unclear refusal: ") + tbcollGetLastError(nullptr);
    }
    int count = 0;
    if ((rc = tbcollCommCount(comm, &count)) != tbcollSuccess || count != 2) failure = "count after finalize";
    tbcollResult_t async_error = tbcollInternalError;
    if ((rc = tbcollCommGetAsyncError(comm, &async_error)) != tbcollSuccess || async_error != tbcollSuccess) {
      failure = "async error after a clean finalize";
    }
  });
}

// GetAsyncError: success while the communicator works; once a peer is gone, the failure that broke it.
TEST(CApiHandles, AsyncErrorReportsWhatBrokeTheCommunicator) {
  setenv("TBCOLL_TIMEOUT", "1", 1);
  tbcollUniqueId id;
  ASSERT_EQ(tbcollGetUniqueId(&id), tbcollSuccess);
  tbcollResult_t before = tbcollInternalError, after = tbcollSuccess, call = tbcollSuccess;
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      tbcollComm_t comm = nullptr;
      if (tbcollCommInitRank(&comm, 2, id, rank) != tbcollSuccess) return;
      float x = 1;
      if (rank == 0) {
        tbcollCommGetAsyncError(comm, &before);
        tbcollAllReduce(&x, &x, 1, tbcollFloat, tbcollSum, comm);  // with the peer
        tbcollBarrier(comm);
        call = tbcollAllReduce(&x, &x, 1, tbcollFloat, tbcollSum, comm);  // the peer never comes: the deadline
        tbcollCommGetAsyncError(comm, &after);
      } else {
        tbcollAllReduce(&x, &x, 1, tbcollFloat, tbcollSum, comm);
        tbcollBarrier(comm);
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      }
      tbcollCommDestroy(comm);
    });
  }
  for (auto& rank : ranks) rank.join();
  unsetenv("TBCOLL_TIMEOUT");
  EXPECT_EQ(before, tbcollSuccess);
  EXPECT_NE(call, tbcollSuccess);
  EXPECT_EQ(after, call) << tbcollGetErrorString(after);
}

}  // namespace
