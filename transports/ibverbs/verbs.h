// The verbs the ibverbs transport calls, as a table of functions: loaded from the system's library with dlopen
// (libibverbs.so.1 on Linux, librdma.dylib on macOS), so one build runs with or without RDMA, or provided by the
// tests' fake fabric. The transport never calls an ibv_* function directly.
//
// The types are rdma-core's (infiniband/verbs.h, from Debian's libibverbs-dev; Apple's SDK header has the same
// layout for this subset). A fake provider allocates these structs itself and never goes through their ops.
//
// In UC mode (the default, and all Apple's Thunderbolt stack offers) the transport uses only: the device list,
// open/close, query_port, query_gid, PD, one MR per connection, CQ, UC QP create/modify/destroy, post_send with
// IBV_WR_SEND and one SGE, post_recv with one SGE, poll_cq. uc_subset below names them; a test checks that nothing
// else is called in UC mode.
#pragma once

#include <infiniband/verbs.h>

#include <string>

namespace tbcoll::ibverbs {

struct VerbsApi {
  /// What provides these verbs: "libibverbs.so.1", "fake" (tests).
  std::string provider;

  // Control path (library symbols in rdma-core and Apple's SDK).
  ibv_device** (*get_device_list)(int* num_devices) = nullptr;
  void (*free_device_list)(ibv_device** list) = nullptr;
  const char* (*get_device_name)(ibv_device* device) = nullptr;
  ibv_context* (*open_device)(ibv_device* device) = nullptr;
  int (*close_device)(ibv_context* context) = nullptr;
  /// Fills the whole ibv_port_attr (the loader zeroes it first: the library's symbol fills its older prefix).
  int (*query_port)(ibv_context* context, uint8_t port, ibv_port_attr* attr) = nullptr;
  int (*query_gid)(ibv_context* context, uint8_t port, int index, ibv_gid* gid) = nullptr;
  ibv_pd* (*alloc_pd)(ibv_context* context) = nullptr;
  int (*dealloc_pd)(ibv_pd* pd) = nullptr;
  ibv_mr* (*reg_mr)(ibv_pd* pd, void* addr, size_t length, int access) = nullptr;
  int (*dereg_mr)(ibv_mr* mr) = nullptr;
  ibv_cq* (*create_cq)(ibv_context* context, int entries, void* user, ibv_comp_channel* channel, int vector) = nullptr;
  int (*destroy_cq)(ibv_cq* cq) = nullptr;
  ibv_qp* (*create_qp)(ibv_pd* pd, ibv_qp_init_attr* attr) = nullptr;
  int (*modify_qp)(ibv_qp* qp, ibv_qp_attr* attr, int mask) = nullptr;
  int (*destroy_qp)(ibv_qp* qp) = nullptr;

  // Data path (inline functions dispatching through the context's ops in rdma-core's and Apple's headers).
  int (*post_send)(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) = nullptr;
  int (*post_recv)(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) = nullptr;
  /// Returns the number of completions written to wc (0..entries), negative on error.
  int (*poll_cq)(ibv_cq* cq, int entries, ibv_wc* wc) = nullptr;
};

/// The system's verbs, loaded once per process; null when the library is absent or lacks a symbol (why_not then
/// says which; may be null). Thread-safe.
const VerbsApi* system_verbs(std::string* why_not);

/// "IBV_WC_RETRY_EXC_ERR"-style name of a completion status (no verbs call needed).
const char* wc_status_name(int status);

}  // namespace tbcoll::ibverbs
