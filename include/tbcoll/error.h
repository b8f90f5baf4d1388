/* tbcoll result codes (C API). The C++ API throws tbcoll::Error subclasses instead.
 *
 * 0-6 are NCCL's codes with NCCL's numbers (tbcollUnhandledError stands where NCCL has ncclUnhandledCudaError).
 * NCCL has no timeout code and numbers ncclInProgress 7; here 7 has been tbcollTimeout since the first release
 * and tbcollInProgress is 8: renumbering would silently change the meaning of results in programs built against
 * the released library. Compare results by name, never by number, and a port from NCCL behaves alike. */
#ifndef TBCOLL_ERROR_H_
#define TBCOLL_ERROR_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  tbcollSuccess = 0,
  tbcollUnhandledError = 1,  /**< unexpected internal failure */
  tbcollSystemError = 2,     /**< a system call or I/O failed (peer closed, connection refused, ...) */
  tbcollInternalError = 3,   /**< an invariant of the library broke */
  tbcollInvalidArgument = 4, /**< a bad argument: null buffer, count overflow, bad dtype/op/peer/root */
  tbcollInvalidUsage = 5,    /**< misuse: ranks disagree on a collective, communicator broken/aborted */
  tbcollRemoteError = 6,     /**< a peer failed or died */
  tbcollTimeout = 7,         /**< a blocking call passed its deadline */
  tbcollInProgress = 8,      /**< an asynchronous operation has not finished (not an error) */
  tbcollNumResults = 9
} tbcollResult_t;

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TBCOLL_ERROR_H_
