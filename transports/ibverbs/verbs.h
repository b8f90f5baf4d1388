// The verbs the ibverbs transport calls, as a table of functions: loaded from the system's library with dlopen
// (libibverbs.so.1 on Linux, librdma.dylib on macOS), so one build runs with or without RDMA, or provided by the
// tests' fake fabric. The transport never calls an ibv_* function directly.
//
// The types are the header's: rdma-core's infiniband/verbs.h on Linux (Debian's libibverbs-dev), the macOS SDK's
// on a Mac (26.2 or later; CMake refuses any other there). The data path (post_send, post_recv, poll_cq) is the
// header's own inline functions, not library symbols; the system table calls them. A fake provider allocates
// these structs itself and never goes through their ops.
//
// In UC mode (the default, and all Apple's Thunderbolt stack offers) the transport uses only: the device list,
// open/close, query_device, query_port, query_gid, PD, one MR per connection, CQ, UC QP create/modify/destroy,
// post_send with IBV_WR_SEND and one SGE, post_recv with one SGE, poll_cq; a test checks that nothing else is
// called in UC mode.
//
// Errors: the calls that return a pointer say why in errno; the others return the code (rdma-core a positive
// errno, Apple's post calls a negative one, e.g. -12): error_of() turns a return value into an errno.
#pragma once

#include <infiniband/verbs.h>

#include <string>

namespace tbcoll::ibverbs {

struct VerbsApi {
  /// What provides these verbs: "libibverbs.so.1", "/usr/lib/librdma.dylib", "fake" (tests).
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
  int (*query_device)(ibv_context* context, ibv_device_attr* attr) = nullptr;
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

  /// Not a verb: the prefix length (netmask bits) of the network interface here that holds this IPv4 address (a
  /// port's IPv4-mapped GID), -1 when none does. It tells which subnet a port's cable is on. The system's reads
  /// the host's interfaces; a fake fabric answers for its own addresses.
  int (*ipv4_prefix)(const uint8_t ipv4[4]) = nullptr;

  /// Not a verb: who shares an opened device (probe.h, opened_device). Null, as the system's table has it: the
  /// process (each device opened once and kept open until exit). A fake fabric whose threads stand for hosts names
  /// the calling thread's host in *scope and returns true; false: every opening is a host of its own, so the opened
  /// device is the caller's alone and closed once it lets go.
  bool (*open_scope)(std::string* scope) = nullptr;
};

/// The errno a verb that returns an int failed with: its return value (positive or negative), or errno where it
/// returned -1 (the C library's convention); EIO where neither says.
int error_of(int returned);

/// The access every memory registration and queue pair gets: local write, remote read and remote write. Apple's
/// provider refuses registrations with local write only, even for SEND and RECV (llama.cpp's transport and MLX
/// register with these three); rxe and RoCE NICs accept them.
constexpr int kAccessFlags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;

/// Whether a device is one of Apple's Thunderbolt ports (rdma_en3, ...) or the verbs are Apple's librdma: UC only,
/// no RC queue pair to probe for.
bool apple_device(const VerbsApi& verbs, const std::string& device);

/// The system's verbs, loaded once per process; null when the library is absent or lacks a symbol (why_not then
/// says which; may be null). Thread-safe.
const VerbsApi* system_verbs(std::string* why_not);

/// "IBV_WC_RETRY_EXC_ERR"-style name of a completion status (no verbs call needed).
const char* wc_status_name(int status);

}  // namespace tbcoll::ibverbs
