/* NCCL's API on tbcoll: a program written for NCCL builds against tbcoll with this include in place of <nccl.h>
 * and -ltbcoll in place of -lnccl. Names, types, argument order and values are NCCL's (2.28); each function is a
 * static inline call of the tbcoll C API (tbcoll/tbcoll.h), so a process may also load the real NCCL.
 *
 * What differs, because tbcoll runs on CPUs:
 *  - buffers are host memory, and the stream argument must be NULL (cudaStream_t is declared here for the
 *    signatures): calls finish before they return, so there is nothing to synchronise afterwards. Any other
 *    stream is ncclInvalidArgument, with ncclGetLastError saying so.
 *  - ncclCommInitAll makes ranks that are threads of this process; devlist entries only have to be distinct.
 *  - ncclConfig_t: blocking 0 is accepted (creation still finishes before the call returns: ncclInProgress is
 *    never returned), netName picks the transport ("Socket": tcp, "IB": ibverbs, or a tbcoll transport name);
 *    the GPU fields (CTAs, CGA, NVLS, ...) are accepted and ignored. Splits keep the parent's settings.
 *  - ncclMemAlloc gives page-aligned host memory; register it with ncclCommRegister for copy-free RDMA sends.
 *  - result codes are NCCL's numbers (tbcoll's own differ for timeouts: see tbcoll/error.h); ncclTimeout is a
 *    call that passed its deadline (TBCOLL_TIMEOUT), which NCCL reports only through its watchdogs.
 *  - fp8 types are declared but refused (ncclInvalidArgument). */
#ifndef TBCOLL_NCCL_H_
#define TBCOLL_NCCL_H_

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "tbcoll/tbcoll.h"

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 0
#define NCCL_SUFFIX "tbcoll"
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* CUDA's own declaration (a repeated identical typedef is allowed where cuda_runtime.h is included too). */
typedef struct CUstream_st* cudaStream_t;

typedef tbcollComm_t ncclComm_t;
#define NCCL_COMM_NULL NULL
#define NCCL_UNIQUE_ID_BYTES TBCOLL_UNIQUE_ID_BYTES
typedef tbcollUniqueId ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclTimeout = 8,
  ncclNumResults = 9
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_API_MAGIC 0xcafebeef

typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
  int graphUsageMode;
  int numRmaCtx;
  int maxP2pPeers;
  int graphStreamOrdering;
  int launchOrderImplicit;
  int numRmaSig;
  int rmaEagerInit;
  int hostCftMode;
  int nvlsHostMode;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                               \
  {                                                                                                           \
    sizeof(ncclConfig_t), NCCL_API_MAGIC, NCCL_VERSION_CODE, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,    \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,           \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,           \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,           \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,           \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,           \
        NCCL_CONFIG_UNDEF_INT                                                                                 \
  }

typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

/* ---- what the wrappers share ---------------------------------------------------------------------------- */

/* tbcoll's result as NCCL numbers it. */
static inline ncclResult_t tbcoll_nccl_result(tbcollResult_t result) {
  switch (result) {
    case tbcollSuccess: return ncclSuccess;
    case tbcollUnhandledError: return ncclUnhandledCudaError;
    case tbcollSystemError: return ncclSystemError;
    case tbcollInternalError: return ncclInternalError;
    case tbcollInvalidArgument: return ncclInvalidArgument;
    case tbcollInvalidUsage: return ncclInvalidUsage;
    case tbcollRemoteError: return ncclRemoteError;
    case tbcollTimeout: return ncclTimeout;
    case tbcollInProgress: return ncclInProgress;
    default: return ncclInternalError;
  }
}

/* NCCL's enums carried into tbcoll's: same numbers, another C type. */
static inline tbcollDataType_t tbcoll_nccl_dtype(ncclDataType_t datatype) { return (tbcollDataType_t)(int)datatype; }
static inline tbcollRedOp_t tbcoll_nccl_op(ncclRedOp_t op) { return (tbcollRedOp_t)(int)op; }

/* The config's fields that mean something here; a config not made from NCCL_CONFIG_INITIALIZER is refused by
 * tbcoll (its magic is left unset). */
static inline tbcollConfig_t tbcoll_nccl_config(const ncclConfig_t* config) {
  tbcollConfig_t out = TBCOLL_CONFIG_INITIALIZER;
  if (config->magic != NCCL_API_MAGIC || config->size < sizeof(size_t) + 2 * sizeof(unsigned int) + sizeof(int)) {
    out.magic = 0;
    out.size = config->size;
    return out;
  }
  out.blocking = config->blocking;
  out.transport = config->netName;
  return out;
}

#define TBCOLL_NCCL_STREAM_CHECK(stream, name)                                                  \
  do {                                                                                           \
    if ((stream) != NULL) return tbcoll_nccl_result(tbcollCheckStream((const void*)(stream), name)); \
  } while (0)

/* ---- the API ------------------------------------------------------------------------------------------ */

static inline ncclResult_t ncclGetVersion(int* version) {
  if (version == NULL) return tbcoll_nccl_result(tbcollGetVersion(NULL));
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
static inline ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  return tbcoll_nccl_result(tbcollGetUniqueId(uniqueId));
}
static inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return tbcoll_nccl_result(tbcollCommInitRank(comm, nranks, commId, rank));
}
static inline ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                                  ncclConfig_t* config) {
  tbcollConfig_t settings;
  if (config == NULL) return tbcoll_nccl_result(tbcollCommInitRankConfig(comm, nranks, commId, rank, NULL));
  settings = tbcoll_nccl_config(config);
  return tbcoll_nccl_result(tbcollCommInitRankConfig(comm, nranks, commId, rank, &settings));
}
static inline ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  return tbcoll_nccl_result(tbcollCommInitAll(comm, ndev, devlist));
}
static inline ncclResult_t ncclCommFinalize(ncclComm_t comm) { return tbcoll_nccl_result(tbcollCommFinalize(comm)); }
static inline ncclResult_t ncclCommDestroy(ncclComm_t comm) { return tbcoll_nccl_result(tbcollCommDestroy(comm)); }
static inline ncclResult_t ncclCommAbort(ncclComm_t comm) { return tbcoll_nccl_result(tbcollCommAbort(comm)); }
static inline ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                         ncclConfig_t* config) {
  tbcollConfig_t settings;
  if (config == NULL) return tbcoll_nccl_result(tbcollCommSplitConfig(comm, color, key, newcomm, NULL));
  settings = tbcoll_nccl_config(config);
  return tbcoll_nccl_result(tbcollCommSplitConfig(comm, color, key, newcomm, &settings));
}
static inline const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled error";
    case ncclSystemError: return "system or I/O error (peer gone, connection failed)";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage (see ncclGetLastError)";
    case ncclRemoteError: return "remote error";
    case ncclInProgress: return "operation in progress";
    case ncclTimeout: return "timed out";
    default: return "unknown result code";
  }
}
static inline const char* ncclGetLastError(ncclComm_t comm) { return tbcollGetLastError(comm); }
static inline ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  tbcollResult_t state = tbcollSuccess;
  tbcollResult_t result = tbcollCommGetAsyncError(comm, asyncError == NULL ? NULL : &state);
  if (asyncError != NULL) *asyncError = tbcoll_nccl_result(state);
  return tbcoll_nccl_result(result);
}
static inline ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return tbcoll_nccl_result(tbcollCommCount(comm, count));
}
static inline ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return tbcoll_nccl_result(tbcollCommUserRank(comm, rank));
}
static inline ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return tbcoll_nccl_result(tbcollCommRegister(comm, buff, size, handle));
}
static inline ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return tbcoll_nccl_result(tbcollCommDeregister(comm, handle));
}
static inline ncclResult_t ncclMemAlloc(void** ptr, size_t size) { return tbcoll_nccl_result(tbcollMemAlloc(ptr, size)); }
static inline ncclResult_t ncclMemFree(void* ptr) { return tbcoll_nccl_result(tbcollMemFree(ptr)); }
static inline ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                                    ncclScalarResidence_t residence, ncclComm_t comm) {
  tbcollRedOp_t made = tbcollSum;
  tbcollResult_t result = tbcollRedOpCreatePreMulSum(op == NULL ? NULL : &made, scalar, tbcoll_nccl_dtype(datatype),
                                                     (tbcollScalarResidence_t)(int)residence, comm);
  if (result == tbcollSuccess) *op = (ncclRedOp_t)(int)made;
  return tbcoll_nccl_result(result);
}
static inline ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return tbcoll_nccl_result(tbcollRedOpDestroy(tbcoll_nccl_op(op), comm));
}

static inline ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                      ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  TBCOLL_NCCL_STREAM_CHECK(stream, "ncclReduce");
  return tbcoll_nccl_result(
      tbcollReduce(sendbuff, recvbuff, count, tbcoll_nccl_dtype(datatype), tbcoll_nccl_op(op), root, comm));
}
static inline ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                     cudaStream_t stream) {
  TBCOLL_NCCL_STREAM_CHECK(stream, "ncclBcast");
  return tbcoll_nccl_result(tbcollBcast(buff, count, tbcoll_nccl_dtype(datatype), root, comm));
}
static inline ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                         int root, ncclComm_t comm, cudaStream_t stream) {
  TBCOLL_NCCL_STREAM_CHECK(stream, "ncclBroadcast");
  return tbcoll_nccl_result(tbcollBroadcast(sendbuff, recvbuff, count, tbcoll_nccl_dtype(datatype), root, comm));
}
static inline ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  TBCOLL_NCCL_STREAM_CHECK(stream, "ncclAllReduce");
  return tbcoll_nccl_result(
      tbcollAllReduce(sendbuff, recvbuff, count, tbcoll_nccl_dtype(datatype), tbcoll_nccl_op(op), comm));
}
static inline ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                             ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                             cudaStream_t stream) {
  TBCOLL_NCCL_STREAM_CHECK(stream, "ncclReduceScatter");
  return tbcoll_nccl_result(
      tbcollReduceScatter(sendbuff, recvbuff, recvcount, tbcoll_nccl_dtype(datatype), tbcoll_nccl_op(op), comm));
}
static inline ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  TBCOLL_NCCL_STREAM_CHECK(stream, "ncclAllGather");
  return tbcoll_nccl_result(tbcollAllGather(sendbuff, recvbuff, sendcount, tbcoll_nccl_dtype(datatype), comm));
}
static inline ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                        ncclComm_t comm, cudaStream_t stream) {
  TBCOLL_NCCL_STREAM_CHECK(stream, "ncclAlltoAll");
  return tbcoll_nccl_result(tbcollAllToAll(sendbuff, recvbuff, count, tbcoll_nccl_dtype(datatype), comm));
}
static inline ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                      int root, ncclComm_t comm, cudaStream_t stream) {
  TBCOLL_NCCL_STREAM_CHECK(stream, "ncclGather");
  return tbcoll_nccl_result(tbcollGather(sendbuff, recvbuff, count, tbcoll_nccl_dtype(datatype), root, comm));
}
static inline ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                       int root, ncclComm_t comm, cudaStream_t stream) {
  TBCOLL_NCCL_STREAM_CHECK(stream, "ncclScatter");
  return tbcoll_nccl_result(tbcollScatter(sendbuff, recvbuff, count, tbcoll_nccl_dtype(datatype), root, comm));
}
static inline ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                    ncclComm_t comm, cudaStream_t stream) {
  TBCOLL_NCCL_STREAM_CHECK(stream, "ncclSend");
  return tbcoll_nccl_result(tbcollSend(sendbuff, count, tbcoll_nccl_dtype(datatype), peer, comm));
}
static inline ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                    cudaStream_t stream) {
  TBCOLL_NCCL_STREAM_CHECK(stream, "ncclRecv");
  return tbcoll_nccl_result(tbcollRecv(recvbuff, count, tbcoll_nccl_dtype(datatype), peer, comm));
}
static inline ncclResult_t ncclGroupStart(void) { return tbcoll_nccl_result(tbcollGroupStart()); }
static inline ncclResult_t ncclGroupEnd(void) { return tbcoll_nccl_result(tbcollGroupEnd()); }

#ifdef __cplusplus
}  // extern "C"
#endif

#endif /* TBCOLL_NCCL_H_ */
