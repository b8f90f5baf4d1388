/* NCCL's "single process, single thread, multiple devices" example, written for NCCL: ncclCommInitAll and one
 * thread driving every rank through groups. The buffers are host memory and the streams NULL, which is what a
 * program for NCCL's API on CPUs has (see tbcoll/nccl.h); the rest is as NCCL's documentation writes it. */
#include <stdio.h>
#include <stdlib.h>

#include "nccl.h"

#define NCCLCHECK(cmd)                                                                                        \
  do {                                                                                                        \
    ncclResult_t r = cmd;                                                                                     \
    if (r != ncclSuccess) {                                                                                   \
      printf("Failed, NCCL error %s:%d '%s': %s\n", __FILE__, __LINE__, ncclGetErrorString(r),               \
             ncclGetLastError(NULL));                                                                         \
      exit(EXIT_FAILURE);                                                                                     \
    }                                                                                                         \
  } while (0)

int main(void) {
  enum { nDev = 4 };
  ncclComm_t comms[nDev];
  const size_t size = 100003;
  int devs[nDev] = {0, 1, 2, 3};
  float* sendbuff[nDev];
  float* recvbuff[nDev];
  float* gathered[nDev];
  cudaStream_t s[nDev];
  int wrong = 0;

  for (int i = 0; i < nDev; ++i) {
    sendbuff[i] = (float*)malloc(size * sizeof(float));
    recvbuff[i] = (float*)malloc(size * sizeof(float));
    gathered[i] = (float*)malloc(nDev * size * sizeof(float));
    for (size_t j = 0; j < size; ++j) sendbuff[i][j] = (float)(i + 1) + (float)(j % 7);
    s[i] = NULL;
  }

  NCCLCHECK(ncclCommInitAll(comms, nDev, devs));

  NCCLCHECK(ncclGroupStart());
  for (int i = 0; i < nDev; ++i)
    NCCLCHECK(ncclAllReduce((const void*)sendbuff[i], (void*)recvbuff[i], size, ncclFloat, ncclSum, comms[i], s[i]));
  NCCLCHECK(ncclGroupEnd());

  /* the average through a pre-multiplied sum, and an all-gather, in one group */
  ncclRedOp_t average[nDev];
  float scalar = 1.0f / nDev;
  for (int i = 0; i < nDev; ++i)
    NCCLCHECK(ncclRedOpCreatePreMulSum(&average[i], &scalar, ncclFloat, ncclScalarHostImmediate, comms[i]));
  NCCLCHECK(ncclGroupStart());
  for (int i = 0; i < nDev; ++i) {
    NCCLCHECK(ncclAllReduce(sendbuff[i], sendbuff[i], size, ncclFloat, average[i], comms[i], s[i]));
    NCCLCHECK(ncclAllGather(sendbuff[i], gathered[i], size, ncclFloat, comms[i], s[i]));
  }
  NCCLCHECK(ncclGroupEnd());

  for (int i = 0; i < nDev; ++i) {
    for (size_t j = 0; j < size; ++j) {
      const float sum = 10.0f + 4.0f * (float)(j % 7);
      if (recvbuff[i][j] != sum) ++wrong;
      for (int r = 0; r < nDev; ++r) {
        if (gathered[i][r * size + j] != sum / nDev) ++wrong;
      }
    }
  }

  for (int i = 0; i < nDev; ++i) {
    NCCLCHECK(ncclRedOpDestroy(average[i], comms[i]));
    NCCLCHECK(ncclCommDestroy(comms[i]));
    free(sendbuff[i]);
    free(recvbuff[i]);
    free(gathered[i]);
  }
  printf("%s: %d wrong\n", wrong == 0 ? "Success" : "FAILED", wrong);
  return wrong == 0 ? 0 : 1;
}
