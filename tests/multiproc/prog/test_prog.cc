// Program the process tests launch through tbcoll-run and mpirun. Builds a communicator from the
// environment and checks collectives against closed-form expectations; exit 0 = all correct.
//   test_prog check [iterations]      all_reduce / all_gather / broadcast / barrier, checked
//   test_prog die RANK                 ranks loop on all_reduce; RANK SIGKILLs itself after a few rounds
//   test_prog mismatch                 rank 1 calls all_reduce with a different count
//   test_prog mixed                    ranks split over two pretend hosts (TBCOLL_HOST_ID): shm inside a host,
//                                      tcp across; prints each rank's transports, then runs check
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

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

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "check";
  if (mode == "mixed") {
    int rank = std::atoi(std::getenv("TBCOLL_RANK") ? std::getenv("TBCOLL_RANK") : "0");
    int size = std::atoi(std::getenv("TBCOLL_WORLD_SIZE") ? std::getenv("TBCOLL_WORLD_SIZE") : "1");
    setenv("TBCOLL_HOST_ID", rank < size / 2 ? "hostA" : "hostB", 1);
  }
  try {
    auto comm = tbcoll::Communicator::init(tbcoll::Config::from_env());
    if (mode == "check") return check(comm, argc > 2 ? std::atoi(argv[2]) : 2);
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
    if (mode == "split_after_parent") {
      // The parent goes first; its child still rendezvouses through rank 0's store for a split of its own.
      std::optional<tbcoll::Communicator> child = comm.split(0, comm.rank());
      { tbcoll::Communicator parent = std::move(comm); }
      std::optional<tbcoll::Communicator> grandchild = child->split(0, -child->rank());
      return check(*grandchild, 1);
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
