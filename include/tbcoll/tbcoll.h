/* tbcoll C API: NCCL-like names, argument order and in-place rule (sendbuff == recvbuff), for engines and FFI.
 *
 *   tbcollUniqueId id;  if (rank == 0) tbcollGetUniqueId(&id);  ...share id out of band (e.g. MPI_Bcast)...
 *   tbcollComm_t comm;  tbcollCommInitRank(&comm, nranks, id, rank);
 *   tbcollAllReduce(send, recv, count, tbcollFloat32, tbcollSum, comm);
 *   tbcollCommDestroy(comm);
 *
 * Or, under tbcoll-run / mpirun / srun: tbcollCommInitFromEnv(&comm). Calls block (there are no streams),
 * except the *Async ones, which queue the call and return a request;
 * every call has a deadline (TBCOLL_TIMEOUT). Errors never abort: they return a tbcollResult_t and
 * tbcollGetLastError(comm) says what happened. */
#ifndef TBCOLL_H_
#define TBCOLL_H_

#include <stddef.h>

#include "tbcoll/error.h"
#include "tbcoll/export.h"
#include "tbcoll/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TBCOLL_UNIQUE_ID_BYTES 256

typedef struct tbcollComm* tbcollComm_t;
/** Rendezvous address and job token of a communicator, created by tbcollGetUniqueId on one rank. */
typedef struct {
  char internal[TBCOLL_UNIQUE_ID_BYTES];
} tbcollUniqueId;

/** Version as MAJOR*10000 + MINOR*100 + PATCH. */
TBCOLL_API tbcollResult_t tbcollGetVersion(int* version);
/** Starts the rendezvous store in this process and describes it. The store runs as long as a communicator of
 *  this process made from the id (or split from one) exists, or a rank of any process is connected to it (every
 *  communicator keeps its connection while it lives); a store that neither needs is stopped at the next
 *  tbcollGetUniqueId of this process. */
TBCOLL_API tbcollResult_t tbcollGetUniqueId(tbcollUniqueId* uniqueId);
/** Collective over nranks ranks: builds a communicator. Blocks until all ranks are connected. */
TBCOLL_API tbcollResult_t tbcollCommInitRank(tbcollComm_t* comm, int nranks, tbcollUniqueId commId, int rank);
/** Settings of a communicator for tbcollCommInitRankConfig (as ncclConfig_t): start from
 *  TBCOLL_CONFIG_INITIALIZER, then set what you need; fields left at TBCOLL_CONFIG_UNDEF_* come from the
 *  environment as for tbcollCommInitRank. */
#define TBCOLL_CONFIG_UNDEF_INT (-2147483647 - 1)
#define TBCOLL_CONFIG_MAGIC 0x7bc011u
typedef struct {
  size_t size;           /**< sizeof(tbcollConfig_t): set by the initializer */
  unsigned int magic;    /**< TBCOLL_CONFIG_MAGIC: set by the initializer */
  unsigned int version;  /**< 1 */
  /** 1 or 0 (NCCL's non-blocking init): both accepted; creation here always finishes before the call returns,
   *  so tbcollInProgress is never returned. */
  int blocking;
  /** The transport for every pair ("tcp", "shm", "ibverbs", "loopback"; NCCL's net names "Socket" and "IB" are
   *  tcp and ibverbs), as TBCOLL_TRANSPORT; NULL: the best per pair. */
  const char* transport;
  int timeoutMs;  /**< every blocking call's deadline (ms), as TBCOLL_TIMEOUT; 0: none */
} tbcollConfig_t;
#define TBCOLL_CONFIG_INITIALIZER \
  { sizeof(tbcollConfig_t), TBCOLL_CONFIG_MAGIC, 1, TBCOLL_CONFIG_UNDEF_INT, NULL, TBCOLL_CONFIG_UNDEF_INT }
/** As tbcollCommInitRank, with settings (config may be NULL: the environment's). A config not made from
 *  TBCOLL_CONFIG_INITIALIZER, or with a value out of range, is tbcollInvalidArgument naming the field. */
TBCOLL_API tbcollResult_t tbcollCommInitRankConfig(tbcollComm_t* comm, int nranks, tbcollUniqueId commId, int rank,
                                                   const tbcollConfig_t* config);
/** As ncclCommInitAll: ndev communicators of one job whose ranks 0..ndev-1 all live in this process (to be
 *  driven by ndev threads, or by one thread through groups). devlist is accepted for NCCL's signature: there
 *  are no devices, so its entries only have to be distinct and non-negative (NULL: 0..ndev-1). */
TBCOLL_API tbcollResult_t tbcollCommInitAll(tbcollComm_t* comms, int ndev, const int* devlist);
/** Builds a communicator from TBCOLL_* / OpenMPI / PMI / Slurm environment variables. */
TBCOLL_API tbcollResult_t tbcollCommInitFromEnv(tbcollComm_t* comm);
#define TBCOLL_SPLIT_NOCOLOR (-1)
/** Collective: a communicator per color, ranks ordered by key; color TBCOLL_SPLIT_NOCOLOR gives *newcomm = NULL. */
TBCOLL_API tbcollResult_t tbcollCommSplit(tbcollComm_t comm, int color, int key, tbcollComm_t* newcomm);
/** As tbcollCommSplit, with NCCL's config argument: NULL or a valid config (checked as tbcollCommInitRankConfig
 *  does); the new communicators keep the parent's settings. */
TBCOLL_API tbcollResult_t tbcollCommSplitConfig(tbcollComm_t comm, int color, int key, tbcollComm_t* newcomm,
                                                const tbcollConfig_t* config);
/** Releases the communicator: freed at once, or by the last call or group still using it on another thread
 *  (destroy never waits for them). Any call with the handle afterwards, a second destroy or abort included,
 *  returns tbcollInvalidUsage (the library keeps a few bytes per handle for that: it never crashes on one). */
TBCOLL_API tbcollResult_t tbcollCommDestroy(tbcollComm_t comm);
/** Breaks the communicator (peers see the failure; calls on it, on any thread, fail within milliseconds) and
 *  releases it as tbcollCommDestroy does. Allowed from another thread, e.g. a watchdog. */
TBCOLL_API tbcollResult_t tbcollCommAbort(tbcollComm_t comm);
/** Collective, as ncclCommFinalize: waits for this communicator's queued asynchronous calls, then for every rank
 *  to get here (a barrier), so no rank still needs the others. Afterwards only tbcollCommDestroy,
 *  tbcollCommCount, tbcollCommUserRank and tbcollCommGetAsyncError take the handle (the others return
 *  tbcollInvalidUsage). Returns the error of a queued call that failed, if one did. */
TBCOLL_API tbcollResult_t tbcollCommFinalize(tbcollComm_t comm);
/** As ncclCommGetAsyncError: *asyncError = tbcollSuccess while the communicator works, else the result of the
 *  failure that broke it (a peer died, a deadline passed, an abort from C++, a queued call failed; tbcollInvalidUsage
 *  when the failure was not returned through this handle). Never blocks; allowed from any thread. */
TBCOLL_API tbcollResult_t tbcollCommGetAsyncError(tbcollComm_t comm, tbcollResult_t* asyncError);
/** As ncclCommRegister: registers [buff, buff + size) with the communicator's transports, so sends from it go
 *  without a copy into the transport's buffers (ibverbs); *handle is for tbcollCommDeregister. The memory must stay
 *  mapped until then, or until the communicator is destroyed or aborted, which ends its registrations. Memory no
 *  transport could take is not an error (sends from it copy). */
TBCOLL_API tbcollResult_t tbcollCommRegister(const tbcollComm_t comm, void* buff, size_t size, void** handle);
/** As ncclCommDeregister: ends a registration (calls still sending from the memory keep it until they finish). A
 *  handle deregistered already, or not one tbcollCommRegister gave, or a communicator destroyed already:
 *  tbcollInvalidUsage; one of another communicator: tbcollInvalidArgument (it stays registered). */
TBCOLL_API tbcollResult_t tbcollCommDeregister(const tbcollComm_t comm, void* handle);
TBCOLL_API tbcollResult_t tbcollCommCount(const tbcollComm_t comm, int* count);
TBCOLL_API tbcollResult_t tbcollCommUserRank(const tbcollComm_t comm, int* rank);

/** A call as tbcollCommSetCallObserver's observer sees it (tbcoll::CallEvent in C++). */
typedef struct {
  int phase;                /**< 0: the call begins, 1: it ended */
  unsigned long long seq;   /**< collectives: their number, the same on every rank; others: collectives before */
  const char* name;         /**< "all_reduce", "send", ... */
  size_t count;
  tbcollDataType_t datatype;
  tbcollRedOp_t op;         /**< meaningful for reductions only */
  int root;                 /**< root, or peer of send/recv; -1: none */
  const char* algorithm;    /**< the schedule or fast path ("" for none) */
  int ok;                   /**< phase 1: 1 if the call succeeded */
  double seconds;           /**< phase 1: how long it took */
} tbcollCallEvent_t;
typedef void (*tbcollCallObserver_t)(const tbcollCallEvent_t* event, void* user);
/** Calls observer(event, user) as each later call of comm begins and ends, on the thread that runs it (an engine's
 *  profiler puts tbcoll's calls on its own timeline); NULL stops it. It must be quick and must not call into the
 *  communicator. Not while asynchronous calls are queued (tbcollInvalidUsage). */
TBCOLL_API tbcollResult_t tbcollCommSetCallObserver(tbcollComm_t comm, tbcollCallObserver_t observer, void* user);

/** As ncclMemAlloc: size bytes of zeroed, page-aligned memory of its own pages, the kind tbcollCommRegister takes
 *  whole (register it for copy-free RDMA sends, as NCCL's user buffer registration asks too). */
TBCOLL_API tbcollResult_t tbcollMemAlloc(void** ptr, size_t size);
/** Frees memory tbcollMemAlloc gave (NULL: nothing to do); any other pointer, or one freed already, is
 *  tbcollInvalidArgument. Registrations of it must be ended first. */
TBCOLL_API tbcollResult_t tbcollMemFree(void* ptr);

/** Where the scalar of tbcollRedOpCreatePreMulSum lives (as ncclScalarResidence_t). */
typedef enum {
  tbcollScalarDevice = 0,        /**< read by every call that uses the operator (memory of this process) */
  tbcollScalarHostImmediate = 1  /**< read once, before tbcollRedOpCreatePreMulSum returns */
} tbcollScalarResidence_t;
/** As ncclRedOpCreatePreMulSum: an operator for comm's all-reduce, reduce and reduce-scatter of datatype that
 *  multiplies this rank's input by *scalar (a value of datatype), then sums over the ranks (the scalar may differ
 *  between ranks). *op is tbcollNumOps or above; it is valid on comm only, until tbcollRedOpDestroy. */
TBCOLL_API tbcollResult_t tbcollRedOpCreatePreMulSum(tbcollRedOp_t* op, void* scalar, tbcollDataType_t datatype,
                                                     tbcollScalarResidence_t residence, tbcollComm_t comm);
TBCOLL_API tbcollResult_t tbcollRedOpDestroy(tbcollRedOp_t op, tbcollComm_t comm);

/** For NCCL's stream argument (tbcoll/nccl.h): tbcollSuccess for NULL, else tbcollInvalidArgument, with
 *  tbcollGetLastError naming `call` (calls here run on the CPU and finish before they return: there is no stream
 *  to queue them on). */
TBCOLL_API tbcollResult_t tbcollCheckStream(const void* stream, const char* call);

/** Static description of a result code. */
TBCOLL_API const char* tbcollGetErrorString(tbcollResult_t result);
/** Message of the last error on this thread (names rank, peer, op); "" if none. comm may be NULL. */
TBCOLL_API const char* tbcollGetLastError(tbcollComm_t comm);

TBCOLL_API tbcollResult_t tbcollAllReduce(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                               tbcollRedOp_t op, tbcollComm_t comm);
/** recvbuff holds nranks * sendcount elements; in place when sendbuff == recvbuff + rank * sendcount. */
TBCOLL_API tbcollResult_t tbcollAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, tbcollDataType_t datatype,
                               tbcollComm_t comm);
/** recvbuff (recvcount elements) = op over ranks of block `rank` of sendbuff (nranks * recvcount elements). */
TBCOLL_API tbcollResult_t tbcollReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, tbcollDataType_t datatype,
                                   tbcollRedOp_t op, tbcollComm_t comm);
/** recvbuff at root = op over ranks of sendbuff; recvbuff is ignored (may be NULL) on other ranks. */
TBCOLL_API tbcollResult_t tbcollReduce(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                            tbcollRedOp_t op, int root, tbcollComm_t comm);
TBCOLL_API tbcollResult_t tbcollBroadcast(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                               int root, tbcollComm_t comm);
/** In-place broadcast, as ncclBcast. */
TBCOLL_API tbcollResult_t tbcollBcast(void* buff, size_t count, tbcollDataType_t datatype, int root, tbcollComm_t comm);
TBCOLL_API tbcollResult_t tbcollBarrier(tbcollComm_t comm);
/** Block p of sendbuff (count elements at sendbuff + p * count; nranks * count in all) goes to rank p; block p of
 *  recvbuff is rank p's block for this rank. In place when sendbuff == recvbuff (each block replaced by the
 *  peer's). */
TBCOLL_API tbcollResult_t tbcollAllToAll(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                              tbcollComm_t comm);
/** As MPI_Alltoallv: sendcounts[p] elements at sendbuff + sdispls[p] go to rank p, recvcounts[p] elements from
 *  rank p land at recvbuff + rdispls[p] (elements; nranks entries each; NULL displacements: packed in rank order).
 *  Zero counts are allowed; rank p's sendcounts[q] must equal rank q's recvcounts[p]: the rank that receives a
 *  block of another size fails with tbcollInvalidUsage naming both arrays, the others at a later call or at the
 *  deadline at the latest. In place when sendbuff == recvbuff: the recv counts and displacements serve both sides
 *  (sendcounts and sdispls NULL or equal to them). */
TBCOLL_API tbcollResult_t tbcollAllToAllv(const void* sendbuff, void* recvbuff, const size_t sendcounts[], const size_t sdispls[],
                               const size_t recvcounts[], const size_t rdispls[], tbcollDataType_t datatype,
                               tbcollComm_t comm);
/** recvbuff at root (nranks * sendcount elements) = the ranks' sendbuffs in rank order; recvbuff is ignored (may
 *  be NULL) on other ranks. In place at the root when sendbuff == recvbuff + root * sendcount. */
TBCOLL_API tbcollResult_t tbcollGather(const void* sendbuff, void* recvbuff, size_t sendcount, tbcollDataType_t datatype,
                            int root, tbcollComm_t comm);
/** recvbuff (recvcount elements) = block `rank` of root's sendbuff (nranks * recvcount elements; ignored, may be
 *  NULL, on other ranks). In place at the root when recvbuff == sendbuff + root * recvcount. */
TBCOLL_API tbcollResult_t tbcollScatter(const void* sendbuff, void* recvbuff, size_t recvcount, tbcollDataType_t datatype,
                             int root, tbcollComm_t comm);
TBCOLL_API tbcollResult_t tbcollSend(const void* sendbuff, size_t count, tbcollDataType_t datatype, int peer,
                          tbcollComm_t comm);
TBCOLL_API tbcollResult_t tbcollRecv(void* recvbuff, size_t count, tbcollDataType_t datatype, int peer, tbcollComm_t comm);
/** Asynchronous collectives: the call is queued and runs on the communicator's progress thread, in order with
 *  the communicator's other calls (a blocking call waits for the queued ones first); buffers must stay valid until
 *  it finished. *request receives a handle: tbcollTest sets *done to 1 once the call finished, tbcollWait blocks
 *  until then (both return the call's error if it failed, with tbcollGetLastError on the calling thread), and
 *  tbcollRequestFree releases the handle (the call still runs if it had not finished; NULL is a no-op; a handle
 *  freed already, or not one an *Async call gave, is tbcollInvalidUsage there and in Test and Wait). Bad arguments are
 *  returned by the *Async call itself (nothing is queued, *request stays NULL); a queued call that fails breaks
 *  the communicator, so the calls queued after it fail fast instead of running out of step with the peers. */
typedef struct tbcollRequest* tbcollRequest_t;
TBCOLL_API tbcollResult_t tbcollAllReduceAsync(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                                    tbcollRedOp_t op, tbcollComm_t comm, tbcollRequest_t* request);
TBCOLL_API tbcollResult_t tbcollAllGatherAsync(const void* sendbuff, void* recvbuff, size_t sendcount,
                                    tbcollDataType_t datatype, tbcollComm_t comm, tbcollRequest_t* request);
TBCOLL_API tbcollResult_t tbcollReduceScatterAsync(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        tbcollDataType_t datatype, tbcollRedOp_t op, tbcollComm_t comm,
                                        tbcollRequest_t* request);
TBCOLL_API tbcollResult_t tbcollReduceAsync(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                                 tbcollRedOp_t op, int root, tbcollComm_t comm, tbcollRequest_t* request);
TBCOLL_API tbcollResult_t tbcollBroadcastAsync(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                                    int root, tbcollComm_t comm, tbcollRequest_t* request);
TBCOLL_API tbcollResult_t tbcollAllToAllAsync(const void* sendbuff, void* recvbuff, size_t count, tbcollDataType_t datatype,
                                   tbcollComm_t comm, tbcollRequest_t* request);
/** The arrays are copied: they may be freed once the call returned. */
TBCOLL_API tbcollResult_t tbcollAllToAllvAsync(const void* sendbuff, void* recvbuff, const size_t sendcounts[],
                                    const size_t sdispls[], const size_t recvcounts[], const size_t rdispls[],
                                    tbcollDataType_t datatype, tbcollComm_t comm, tbcollRequest_t* request);
TBCOLL_API tbcollResult_t tbcollGatherAsync(const void* sendbuff, void* recvbuff, size_t sendcount, tbcollDataType_t datatype,
                                 int root, tbcollComm_t comm, tbcollRequest_t* request);
TBCOLL_API tbcollResult_t tbcollScatterAsync(const void* sendbuff, void* recvbuff, size_t recvcount, tbcollDataType_t datatype,
                                  int root, tbcollComm_t comm, tbcollRequest_t* request);
TBCOLL_API tbcollResult_t tbcollTest(tbcollRequest_t request, int* done);
TBCOLL_API tbcollResult_t tbcollWait(tbcollRequest_t request);
TBCOLL_API tbcollResult_t tbcollRequestFree(tbcollRequest_t request);

/** As ncclGroupStart/End: calls between them on this thread are recorded and run at the outermost
 *  tbcollGroupEnd, which blocks until they all completed (their buffers, and tbcollAllToAllv's arrays, must stay
 *  valid until then). Per communicator, its sends and receives run together (in any order across ranks, a rank
 *  may send to itself), then its collectives in the order they were called. Several communicators in one group
 *  run at once, each on a thread of its own, as do tbcollCommInitRank(Config) calls made in the group (*comm is
 *  set by tbcollGroupEnd): one thread may drive every rank of tbcollCommInitAll's communicators. Errors of the
 *  recorded calls are returned by tbcollGroupEnd (the first, in the order the communicators joined). Splits,
 *  tbcollCommFinalize and the *Async calls inside a group are refused (tbcollInvalidUsage). */
TBCOLL_API tbcollResult_t tbcollGroupStart(void);
TBCOLL_API tbcollResult_t tbcollGroupEnd(void);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  /* TBCOLL_H_ */
