// Minimal tbcoll program: every rank contributes its rank number; all ranks print the sum.
//   tbcoll-run -n 2 ./allreduce_example
#include <cstdio>
#include <vector>

#include "tbcoll/tbcoll.hpp"

int main() {
  try {
    auto comm = tbcoll::Communicator::init(tbcoll::Config::from_env());
    std::vector<float> data(1024, static_cast<float>(comm.rank()));
    comm.all_reduce(data.data(), data.data(), data.size(), tbcoll::DataType::kFloat32, tbcoll::ReduceOp::kSum);
    std::printf("rank %d of %d: sum of ranks = %g\n", comm.rank(), comm.size(), data[0]);
  } catch (const tbcoll::Error& error) {  // every failure is a tbcoll::Error that names what went wrong
    std::fprintf(stderr, "allreduce_example: %s\n", error.what());
    return 1;
  }
  return 0;
}
