// Program the process tests launch through tbcoll-run and mpirun. Builds a communicator from the
// environment and checks collectives against closed-form expectations; exit 0 = all correct.
//   test_prog check [iterations]      all_reduce / all_gather / broadcast / barrier, checked
//   test_prog sendrecv [iterations]   send/recv around the ring and between every pair, both ways, checked
//   test_prog die RANK                 ranks loop on all_reduce; RANK SIGKILLs itself after a few rounds
//   test_prog mismatch                 rank 1 calls all_reduce with a different count
//   test_prog mixed                    ranks split over two pretend hosts (TBCOLL_HOST_ID): shm inside a host,
//                                      tcp across; prints each rank's transports, then runs check
//   test_prog late RANK SECONDS        prints "pid <pid>"; RANK sleeps SECONDS before init; then as check 1
//   test_prog steady ROUNDS [RANK MS]  prints "ready" after init; ROUNDS checked all_reduces 5 ms apart (RANK sleeps
//                                      MS before round 5: a slow peer); prints "done (longest round N ms)" (the
//                                      fault matrix; the longest all_reduce tells a stall survived)
//   test_prog secret_child             as check 1, then a child shell says whether TBCOLL_SECRET reached it
//   test_prog c_split RANK ID          C API, 3 ranks from unique id ID (its text): splits with colour 0 and
//                                      all-reduces on the child, then splits the child (rank 0 runs elsewhere)
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "tbcoll/tbcoll.h"
#include "tbcoll/tbcoll.hpp"

using tbcoll::DataType;
using tbcoll::ReduceOp;

static int check(tbcoll::Communicator& comm, int iterations) {
  const int r = comm.rank(), n = comm.size();
  int wrong = 0;
  for (size_t count : {size_t{1}, size_t{7}, size_t{4096}, size_t{(1 << 18) + 3}}) {
    for (int it = 0; it < iterations; ++it) {
      std::vector<float> in(count), out(count);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((r + 1) * ((i % 13) + 1));
      comm.all_reduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
      float ranks = static_cast<float>(n * (n + 1) / 2);
      for (size_t i = 0; i < count; ++i) wrong += out[i] != ranks * static_cast<float>((i % 13) + 1);
      std::vector<int32_t> mine(count, r + 1), all(count * n);
      comm.all_gather(mine.data(), all.data(), count, DataType::kInt32);
      for (size_t i = 0; i < all.size(); ++i) wrong += all[i] != static_cast<int32_t>(i / count) + 1;
      std::vector<int64_t> data(count, r == n - 1 ? 42 : -1);
      comm.broadcast(data.data(), data.data(), count, DataType::kInt64, n - 1);
      for (int64_t v : data) wrong += v != 42;
      comm.barrier();
    }
  }
  std::printf("rank %d/%d: %s (%d wrong)\n", r, n, wrong == 0 ? "OK" : "WRONG", wrong);
  return wrong == 0 ? 0 : 1;
}

// Point to point: around the ring (even ranks send first, odd ones receive first, so blocking sends cannot wait
// on each other in a cycle) and then between every pair in one global order; every element tells where it came
// from, where it went and which round it belongs to, so a misrouted or stale message counts as wrong.
static int sendrecv(tbcoll::Communicator& comm, int iterations) {
  const int r = comm.rank(), n = comm.size();
  long long wrong = 0;
  auto value = [](int src, int dst, size_t i, int round) {
    return static_cast<int32_t>(src * 1000003 + dst * 7919 + static_cast<int>(i % 100003) + round * 31);
  };
  auto exchange = [&](int peer, bool send_first, size_t count, int round) {
    std::vector<int32_t> out(count), in(count, -1);
    for (size_t i = 0; i < count; ++i) out[i] = value(r, peer, i, round);
    if (send_first) comm.send(out.data(), count, DataType::kInt32, peer);
    comm.recv(in.data(), count, DataType::kInt32, peer);
    if (!send_first) comm.send(out.data(), count, DataType::kInt32, peer);
    for (size_t i = 0; i < count; ++i) wrong += in[i] != value(peer, r, i, round);
  };
  int round = 0;
  for (size_t count : {size_t{1}, size_t{7}, size_t{1024}, size_t{4099}, size_t{(1 << 18) + 3}}) {
    for (int it = 0; it < iterations; ++it, ++round) {
      if (n == 1) continue;
      const int next = (r + 1) % n, prev = (r + n - 1) % n;
      std::vector<int32_t> out(count), in(count, -1);
      for (size_t i = 0; i < count; ++i) out[i] = value(r, next, i, round);
      if (r % 2 == 0) comm.send(out.data(), count, DataType::kInt32, next);
      comm.recv(in.data(), count, DataType::kInt32, prev);
      if (r % 2 != 0) comm.send(out.data(), count, DataType::kInt32, next);
      for (size_t i = 0; i < count; ++i) wrong += in[i] != value(prev, r, i, round);
      for (int a = 0; a < n; ++a) {
        for (int b = a + 1; b < n; ++b) {
          if (r == a) exchange(b, true, count, round);
          if (r == b) exchange(a, false, count, round);
        }
      }
    }
  }
  // Bytes, an odd count: frames that do not end on an element boundary of a wider type.
  if (n > 1) {
    const size_t count = (size_t{1} << 20) + 1;
    std::vector<uint8_t> out(count), in(count, 0);
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<uint8_t>(i * 7 + r);
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    if (r % 2 == 0) comm.send(out.data(), count, DataType::kUint8, next);
    comm.recv(in.data(), count, DataType::kUint8, prev);
    if (r % 2 != 0) comm.send(out.data(), count, DataType::kUint8, next);
    for (size_t i = 0; i < count; ++i) wrong += in[i] != static_cast<uint8_t>(i * 7 + prev);
  }
  comm.barrier();
  std::printf("rank %d/%d: sendrecv %s (%lld wrong)\n", r, n, wrong == 0 ? "OK" : "WRONG", wrong);
  return wrong == 0 ? 0 : 1;
}

// Ranks 1 and 2 of a 3-rank C API job whose rank 0 (another process) hosts the unique id's store.
static int c_split(int rank, const char* id_text) {
  tbcollUniqueId id{};
  std::strncpy(id.internal, id_text, sizeof(id.internal) - 1);
  tbcollComm_t comm = nullptr, child = nullptr, grandchild = nullptr;
  auto failed = [&](const char* what, tbcollResult_t rc) {
    std::fprintf(stderr, "rank %d: %s: %s: %s\n", rank, what, tbcollGetErrorString(rc), tbcollGetLastError(nullptr));
    return 1;
  };
  tbcollResult_t rc = tbcollCommInitRank(&comm, 3, id, rank);
  if (rc != tbcollSuccess) return failed("init", rc);
  if ((rc = tbcollCommSplit(comm, 0, rank, &child)) != tbcollSuccess) return failed("split", rc);
  tbcollCommDestroy(comm);
  int x = 1;
  if ((rc = tbcollAllReduce(&x, &x, 1, tbcollInt32, tbcollSum, child)) != tbcollSuccess) {
    return failed("all_reduce", rc);
  }
  if ((rc = tbcollCommSplit(child, 0, rank, &grandchild)) != tbcollSuccess) return failed("split of the child", rc);
  int y = 1;
  if ((rc = tbcollAllReduce(&y, &y, 1, tbcollInt32, tbcollSum, grandchild)) != tbcollSuccess) {
    return failed("all_reduce on the grandchild", rc);
  }
  tbcollCommDestroy(grandchild);
  tbcollCommDestroy(child);
  std::printf("rank %d: x=%d y=%d\n", rank, x, y);
  return x == 2 && y == 2 ? 0 : 1;
}

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "check";
  if (mode == "c_split" && argc > 3) return c_split(std::atoi(argv[2]), argv[3]);
  if (mode == "mixed") {
    int rank = std::atoi(std::getenv("TBCOLL_RANK") ? std::getenv("TBCOLL_RANK") : "0");
    int size = std::atoi(std::getenv("TBCOLL_WORLD_SIZE") ? std::getenv("TBCOLL_WORLD_SIZE") : "1");
    setenv("TBCOLL_HOST_ID", rank < size / 2 ? "hostA" : "hostB", 1);
  }
  if (mode == "late" && argc > 3) {  // the others wait in set-up meanwhile, their segments created
    std::printf("pid %d\n", static_cast<int>(getpid()));
    std::fflush(stdout);
    const char* rank = std::getenv("TBCOLL_RANK");
    if (rank != nullptr && std::atoi(rank) == std::atoi(argv[2])) sleep(static_cast<unsigned>(std::atoi(argv[3])));
  }
  try {
    auto comm = tbcoll::Communicator::init(tbcoll::Config::from_env());
    if (mode == "late") return check(comm, 1);
    if (mode == "check") return check(comm, argc > 2 ? std::atoi(argv[2]) : 2);
    if (mode == "sendrecv") return sendrecv(comm, argc > 2 ? std::atoi(argv[2]) : 2);
    if (mode == "mixed" || mode == "transports") {  // transports: as the library picks them on its own
      std::string names;
      for (int p = 0; p < comm.size(); ++p) names += (p ? "," : "") + comm.transport_name(p);
      std::printf("rank %d transports %s\n", comm.rank(), names.c_str());
      return check(comm, 1);
    }
    if (mode == "die") {
      int victim = argc > 2 ? std::atoi(argv[2]) : 1;
      std::vector<float> buf(1024, 1.0f);
      auto start = std::chrono::steady_clock::now();
      for (int round = 0;; ++round) {
        if (round == 20 && comm.rank() == victim) kill(getpid(), SIGKILL);
        comm.all_reduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kMax);
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(120)) return 3;
      }
    }
    if (mode == "steady") {
      const int rounds = argc > 2 ? std::atoi(argv[2]) : 100;
      const int slow_rank = argc > 4 ? std::atoi(argv[3]) : -1;
      const int slow_ms = argc > 4 ? std::atoi(argv[4]) : 0;
      std::printf("ready\n");
      std::fflush(stdout);
      std::vector<float> buf(1024);
      std::chrono::steady_clock::duration longest{};
      for (int round = 0; round < rounds; ++round) {
        if (round == 5 && comm.rank() == slow_rank) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
        std::fill(buf.begin(), buf.end(), static_cast<float>(comm.rank() + round));
        const auto start = std::chrono::steady_clock::now();
        comm.all_reduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kMax);
        longest = std::max(longest, std::chrono::steady_clock::now() - start);
        if (buf[0] != static_cast<float>(comm.size() - 1 + round)) {
          std::fprintf(stderr, "round %d: wrong result %g\n", round, buf[0]);
          return 4;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      std::printf("done (longest round %lld ms)\n", static_cast<long long>(
                      std::chrono::duration_cast<std::chrono::milliseconds>(longest).count()));
      return 0;
    }
    if (mode == "split_after_parent") {
      // The parent goes first; its child still rendezvouses through rank 0's store for a split of its own.
      std::optional<tbcoll::Communicator> child = comm.split(0, comm.rank());
      { tbcoll::Communicator parent = std::move(comm); }
      std::optional<tbcoll::Communicator> grandchild = child->split(0, -child->rank());
      return check(*grandchild, 1);
    }
    if (mode == "secret_child") {  // the job ran with the secret; a child of the rank gets none of it
      const int wrong = check(comm, 1);
      const int child = std::system("test -z \"${TBCOLL_SECRET+set}\" && echo CHILD-HAS-NO-SECRET");
      return wrong != 0 ? wrong : child != 0 ? 3 : 0;
    }
    if (mode == "mismatch") {
      std::vector<float> buf(100, 1.0f);
      comm.all_reduce(buf.data(), buf.data(), comm.rank() == 1 ? 99 : 100, DataType::kFloat32, ReduceOp::kSum);
      return 0;
    }
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  } catch (const tbcoll::Error& error) {
    std::fprintf(stderr, "tbcoll error (code %d): %s\n", static_cast<int>(error.code()), error.what());
    return 1;
  }
}
