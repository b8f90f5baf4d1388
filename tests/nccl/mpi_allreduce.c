/* NCCL's "one device per process" example with MPI, and the core loop of nccl-tests' all_reduce_perf: warm-up
 * and timed iterations per size, in and out of place, every result checked. Host buffers and NULL streams (see
 * tbcoll/nccl.h); otherwise as written for NCCL. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"

#define MPICHECK(cmd)                                                      \
  do {                                                                     \
    int e = cmd;                                                           \
    if (e != MPI_SUCCESS) {                                                \
      printf("Failed: MPI error %s:%d '%d'\n", __FILE__, __LINE__, e);     \
      exit(EXIT_FAILURE);                                                  \
    }                                                                      \
  } while (0)

#define NCCLCHECK(cmd)                                                                                        \
  do {                                                                                                        \
    ncclResult_t r = cmd;                                                                                     \
    if (r != ncclSuccess) {                                                                                   \
      printf("Failed, NCCL error %s:%d '%s': %s\n", __FILE__, __LINE__, ncclGetErrorString(r),               \
             ncclGetLastError(NULL));                                                                         \
      exit(EXIT_FAILURE);                                                                                     \
    }                                                                                                         \
  } while (0)

static long check(const int32_t* buf, size_t count, int nRanks) {
  long wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    int32_t expected = 0;
    for (int r = 0; r < nRanks; ++r) expected += (int32_t)(r * 1000 + (int)(i % 1000));
    if (buf[i] != expected) ++wrong;
  }
  return wrong;
}

int main(int argc, char* argv[]) {
  int myRank, nRanks;
  ncclUniqueId id;
  ncclComm_t comm;
  cudaStream_t s = NULL;
  long wrong = 0, allWrong = 0;
  const size_t maxCount = 1 << 18;

  MPICHECK(MPI_Init(&argc, &argv));
  MPICHECK(MPI_Comm_rank(MPI_COMM_WORLD, &myRank));
  MPICHECK(MPI_Comm_size(MPI_COMM_WORLD, &nRanks));

  if (myRank == 0) ncclGetUniqueId(&id);
  MPICHECK(MPI_Bcast((void*)&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
  NCCLCHECK(ncclCommInitRank(&comm, nRanks, id, myRank));

  int32_t* sendbuff = (int32_t*)malloc(maxCount * sizeof(int32_t));
  int32_t* recvbuff = (int32_t*)malloc(maxCount * sizeof(int32_t));
  for (size_t count = 1; count <= maxCount; count *= 8) {
    for (int inPlace = 0; inPlace <= 1; ++inPlace) {
      int32_t* out = inPlace ? sendbuff : recvbuff;
      for (int iter = 0; iter < 5 + 20; ++iter) { /* 5 warm-up, 20 timed, as -w 5 -n 20 */
        for (size_t i = 0; i < count; ++i) sendbuff[i] = (int32_t)(myRank * 1000 + (int)(i % 1000));
        memset(recvbuff, 0, count * sizeof(int32_t));
        double start = MPI_Wtime();
        NCCLCHECK(ncclAllReduce((const void*)sendbuff, (void*)out, count, ncclInt32, ncclSum, comm, s));
        double us = (MPI_Wtime() - start) * 1e6;
        if (iter == 24 && myRank == 0) printf("%10zu B %s %9.2f us\n", count * 4, inPlace ? "in " : "out", us);
        wrong += check(out, count, nRanks);
      }
    }
  }

  MPICHECK(MPI_Allreduce(&wrong, &allWrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));
  NCCLCHECK(ncclCommFinalize(comm));
  NCCLCHECK(ncclCommDestroy(comm));
  free(sendbuff);
  free(recvbuff);
  MPICHECK(MPI_Finalize());
  if (myRank == 0) printf("%s: %ld wrong\n", allWrong == 0 ? "Success" : "FAILED", allWrong);
  return allWrong == 0 ? 0 : 1;
}
