// An outside program using the installed tbcoll through both APIs on a single-rank communicator.
#include <cstdio>

#include <tbcoll/tbcoll.h>
#include <tbcoll/tbcoll.hpp>

int main() {
  tbcoll::Config config;
  config.rank = 0;
  config.world_size = 1;
  auto comm = tbcoll::Communicator::init(config);
  float value = 2.5f;
  comm.all_reduce(&value, &value, 1, tbcoll::DataType::kFloat32, tbcoll::ReduceOp::kSum);

  tbcollUniqueId id;
  tbcollComm_t c_comm = nullptr;
  if (tbcollGetUniqueId(&id) != tbcollSuccess || tbcollCommInitRank(&c_comm, 1, id, 0) != tbcollSuccess) return 1;
  int sum = 0, one = 1;
  if (tbcollAllReduce(&one, &sum, 1, tbcollInt32, tbcollSum, c_comm) != tbcollSuccess) return 2;
  tbcollCommDestroy(c_comm);
  if (value != 2.5f || sum != 1) return 3;
  std::printf("consumer ok\n");
  return 0;
}
