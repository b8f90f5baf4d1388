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
/** Builds a communicator from TBCOLL_* / OpenMPI / PMI / Slurm environment variables. */
TBCOLL_API tbcollResult_t tbcollCommInitFromEnv(tbcollComm_t* comm);
#define TBCOLL_SPLIT_NOCOLOR (-1)
/** Collective: a communicator per color, ranks ordered by key; color TBCOLL_SPLIT_NOCOLOR gives *newcomm = NULL. */
TBCOLL_API tbcollResult_t tbcollCommSplit(tbcollComm_t comm, int color, int key, tbcollComm_t* newcomm);
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
 *  mapped until then. Memory no transport could take is not an error (sends from it copy). */
TBCOLL_API tbcollResult_t tbcollCommRegister(const tbcollComm_t comm, void* buff, size_t size, void** handle);
/** As ncclCommDeregister: ends a registration (calls still sending from the memory keep it until they finish). A
 *  handle deregistered already, or not one tbcollCommRegister gave: tbcollInvalidUsage; one of another
 *  communicator: tbcollInvalidArgument (it stays registered). */
TBCOLL_API tbcollResult_t tbcollCommDeregister(const tbcollComm_t comm, void* handle);
TBCOLL_API tbcollResult_t tbcollCommCount(const tbcollComm_t comm, int* count);
TBCOLL_API tbcollResult_t tbcollCommUserRank(const tbcollComm_t comm, int* rank);

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

/** As ncclGroupStart/End, for send/recv: calls between them (on this thread) are recorded and run at the
 *  outermost tbcollGroupEnd, which blocks until they all completed. The calls of one communicator run together;
 *  several communicators in one group run one after the other, in the order they joined it, so a group must not
 *  make one communicator's calls wait for another's (use one communicator for such an exchange). Collectives
 *  and splits inside a group are refused (tbcollInvalidUsage). */
TBCOLL_API tbcollResult_t tbcollGroupStart(void);
TBCOLL_API tbcollResult_t tbcollGroupEnd(void);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  /* TBCOLL_H_ */
