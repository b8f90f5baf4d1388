// How an inference engine drives NCCL, written for NCCL: a non-blocking config'd init polled to completion, a
// tensor-parallel communicator split off the world with a config, buffers from ncclMemAlloc registered with the
// communicator, and per layer one group holding the tensor-parallel all-reduce, the world's all-gather of the
// logits and a pipeline-style ring of sends and receives. Then the pre-multiplied average with a scalar read at
// call time, and the error path: a stream is refused with a message. Host memory and NULL streams (tbcoll/nccl.h).
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <nccl.h>

#define NCCLCHECK(cmd)                                                                                   \
  do {                                                                                                   \
    ncclResult_t r = cmd;                                                                                \
    if (r != ncclSuccess && r != ncclInProgress) {                                                       \
      std::printf("Failed, NCCL error %s:%d '%s': %s\n", __FILE__, __LINE__, ncclGetErrorString(r),     \
                  ncclGetLastError(NULL));                                                               \
      std::exit(EXIT_FAILURE);                                                                           \
    }                                                                                                    \
  } while (0)

static long wrong = 0;
static void expect(bool ok, const char* what, int rank) {
  if (!ok) {
    std::printf("rank %d: wrong %s\n", rank, what);
    ++wrong;
  }
}

int main(int argc, char* argv[]) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  ncclUniqueId id;
  if (rank == 0) NCCLCHECK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.netName = "Socket";
  config.minCTAs = 4;
  ncclComm_t world;
  NCCLCHECK(ncclCommInitRankConfig(&world, nranks, id, rank, &config));
  ncclResult_t state;
  do {
    NCCLCHECK(ncclCommGetAsyncError(world, &state));
  } while (state == ncclInProgress);
  NCCLCHECK(state);

  ncclComm_t tp;  // tensor-parallel pairs
  NCCLCHECK(ncclCommSplit(world, rank / 2, rank, &tp, &config));
  int tp_rank, tp_size;
  NCCLCHECK(ncclCommUserRank(tp, &tp_rank));
  NCCLCHECK(ncclCommCount(tp, &tp_size));

  const size_t hidden = 4099, vocab = 513;
  float* x;
  NCCLCHECK(ncclMemAlloc(reinterpret_cast<void**>(&x), hidden * sizeof(float)));
  void* handle;
  NCCLCHECK(ncclCommRegister(world, x, hidden * sizeof(float), &handle));
  std::vector<float> logits(vocab), all_logits(vocab * nranks), ring_out(vocab), ring_in(vocab);
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  for (int layer = 0; layer < 8; ++layer) {
    for (size_t i = 0; i < hidden; ++i) x[i] = static_cast<float>(rank + layer + i % 5);
    for (size_t i = 0; i < vocab; ++i) logits[i] = ring_out[i] = static_cast<float>(rank * 10 + layer);
    NCCLCHECK(ncclGroupStart());
    NCCLCHECK(ncclAllReduce(x, x, hidden, ncclFloat, ncclSum, tp, NULL));
    NCCLCHECK(ncclAllGather(logits.data(), all_logits.data(), vocab, ncclFloat, world, NULL));
    NCCLCHECK(ncclSend(ring_out.data(), vocab, ncclFloat, next, world, NULL));
    NCCLCHECK(ncclRecv(ring_in.data(), vocab, ncclFloat, prev, world, NULL));
    NCCLCHECK(ncclGroupEnd());
    const int first = rank / 2 * 2;
    float tp_sum = 0;
    for (int r = first; r < first + tp_size; ++r) tp_sum += static_cast<float>(r + layer + 3);  // x[3]
    expect(x[3] == tp_sum, "tensor-parallel all-reduce", rank);
    for (int r = 0; r < nranks; ++r) expect(all_logits[r * vocab + 7] == static_cast<float>(r * 10 + layer), "all-gather", rank);
    expect(ring_in[vocab - 1] == static_cast<float>(prev * 10 + layer), "ring receive", rank);
  }

  // The average as a pre-multiplied sum whose scalar is read by each call (ncclScalarDevice).
  float scale = 1.0f / static_cast<float>(nranks);
  ncclRedOp_t average;
  NCCLCHECK(ncclRedOpCreatePreMulSum(&average, &scale, ncclFloat, ncclScalarDevice, world));
  std::vector<float> grad(1001, static_cast<float>(rank + 1)), reduced(1001);
  NCCLCHECK(ncclAllReduce(grad.data(), reduced.data(), grad.size(), ncclFloat, average, world, NULL));
  expect(reduced[1000] == static_cast<float>(nranks + 1) / 2, "average", rank);
  scale = 2.0f;
  NCCLCHECK(ncclReduceScatter(std::vector<float>(nranks * 3, 1.0f).data(), reduced.data(), 3, ncclFloat, average,
                              world, NULL));
  expect(reduced[2] == 2.0f * static_cast<float>(nranks), "pre-multiplied reduce-scatter", rank);
  NCCLCHECK(ncclRedOpDestroy(average, world));

  // Errors are results with a message, never a crash.
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(0x1000);
  expect(ncclBroadcast(x, x, 1, ncclFloat, 0, world, stream) == ncclInvalidArgument, "stream refusal", rank);
  expect(std::strstr(ncclGetLastError(world), "stream") != nullptr, "stream refusal's message", rank);
  expect(ncclAllReduce(x, x, 1, ncclFloat8e4m3, ncclSum, world, NULL) == ncclInvalidArgument, "fp8 refusal", rank);

  NCCLCHECK(ncclCommDeregister(world, handle));
  NCCLCHECK(ncclMemFree(x));
  NCCLCHECK(ncclCommFinalize(tp));
  NCCLCHECK(ncclCommDestroy(tp));
  NCCLCHECK(ncclCommFinalize(world));
  NCCLCHECK(ncclCommDestroy(world));
  long all = 0;
  MPI_Allreduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  if (rank == 0) std::printf("%s: %ld wrong\n", all == 0 ? "Success" : "FAILED", all);
  return all == 0 ? 0 : 1;
}
