// The VerbsApi table of the fake fabric and the tests' controls: one mutex around everything, a map from every
// handed-out rdma-core struct to the fake's record of it. The wire itself is in fabric.cc. See fake_verbs.h.
#include "fake_verbs/fake_verbs.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "fake_verbs/fabric.h"

namespace tbcoll::ibverbs::fake {
namespace {

using namespace detail;  // NOLINT(google-build-using-namespace): this file is detail's other half

std::mutex g_mutex;
std::condition_variable g_resumed;  // a fault control ran (faults.h): paused calls look again
std::unique_ptr<Fabric> g_fabric;  // made on first use with the default options, or by reset()

Fabric& locked_fabric() {
  if (!g_fabric) g_fabric = make_fabric(Options{});
  return *g_fabric;
}

// Time spent in the table's calls, in ticks of ticks(): the time-stamp counter where there is one (cheaper to read
// than the clock, which matters for calls of a few hundred nanoseconds), else steady_clock nanoseconds.
std::atomic<uint64_t> g_provider_ticks{0};

uint64_t ticks() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
#endif
}

// Nanoseconds per tick, measured once against steady_clock.
double ns_per_tick() {
  static const double ratio = [] {
    const auto start = std::chrono::steady_clock::now();
    const uint64_t first = ticks();
    while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(20)) {
    }
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    const uint64_t last = ticks();
    return last > first ? ns / static_cast<double>(last - first) : 1.0;
  }();
  return ratio;
}

// Adds the time of its scope to g_provider_ticks.
class Timed {
 public:
  Timed() : start_(ticks()) {}
  ~Timed() { g_provider_ticks.fetch_add(ticks() - start_, std::memory_order_relaxed); }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  uint64_t start_;
};

thread_local int g_thread_host = -1;
std::atomic<uint64_t> g_generation{0};  // reset()s so far: opened devices of an earlier fabric are never reused

// Locks the fabric for one VerbsApi call, counts it and times it (locking included).
class Call {
 public:
  explicit Call(const char* name) : lock_(g_mutex) { ++locked_fabric().calls[name]; }
  Fabric& fabric() { return *g_fabric; }
  /// A data-path call on a paused context's resources waits here (the mutex released) until it is resumed.
  void pause_point(ibv_context* verbs) {
    g_resumed.wait(lock_, [&] {
      Context* context = Fabric::find(g_fabric->contexts, verbs);
      return context == nullptr || !context->paused;
    });
  }

 private:
  Timed timed_;  // first: it outlives the lock
  std::unique_lock<std::mutex> lock_;
};

template <typename T>
T* fail(int err) {
  errno = err;
  return nullptr;
}

int device_index(const Fabric& fabric, const ibv_device* device) {
  for (size_t i = 0; i < fabric.devices.size(); ++i) {
    if (fabric.devices[i].get() == device) return static_cast<int>(i);
  }
  return -1;
}

// ---- the table --------------------------------------------------------------------------------------------

ibv_device** get_device_list(int* num_devices) {
  Call call("get_device_list");
  Fabric& fabric = call.fabric();
  if (num_devices) *num_devices = 0;
  if (fabric.options.no_kernel_support) return fail<ibv_device*>(ENOSYS);
  auto* list = new ibv_device*[fabric.devices.size() + 1];
  for (size_t i = 0; i < fabric.devices.size(); ++i) list[i] = fabric.devices[i].get();
  list[fabric.devices.size()] = nullptr;
  if (num_devices) *num_devices = static_cast<int>(fabric.devices.size());
  return list;
}

void free_device_list(ibv_device** list) {
  Call call("free_device_list");
  delete[] list;
}

const char* get_device_name(ibv_device* device) {
  Call call("get_device_name");
  for (auto& own : call.fabric().devices) {
    if (own.get() == device) return device->name;
  }
  return fail<const char>(EINVAL);
}

ibv_context* open_device(ibv_device* device) {
  Call call("open_device");
  Fabric& fabric = call.fabric();
  const int index = device_index(fabric, device);
  if (index < 0) return fail<ibv_context>(ENODEV);
  auto context = std::make_unique<Context>();
  context->verbs.device = device;
  context->verbs.cmd_fd = -1;
  context->verbs.async_fd = -1;
  context->verbs.num_comp_vectors = 1;
  context->port = port_of(fabric, g_thread_host >= 0 ? g_thread_host : fabric.next_own_host--, index);
  context->serial = fabric.next_serial++;
  context->opener = std::this_thread::get_id();
  ibv_context* verbs = &context->verbs;
  fabric.contexts.emplace(verbs, std::move(context));
  return verbs;
}

int close_device(ibv_context* verbs) {
  Call call("close_device");
  Fabric& fabric = call.fabric();
  Context* context = Fabric::find(fabric.contexts, verbs);
  if (!context) return EINVAL;
  // Like the kernel when a process exits: whatever is left goes.
  for (auto it = fabric.qps.begin(); it != fabric.qps.end();) {
    if (it->second->context == context) {
      fabric.counters.queued_rc -= it->second->queued.size();
      fabric.qp_by_number.erase(it->second->verbs.qp_num);
      --context->port->qps;
      it = fabric.qps.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = fabric.mrs.begin(); it != fabric.mrs.end();) {
    if (it->second->pd->context == context) {
      fabric.mr_by_key.erase(it->second->verbs.lkey);
      --context->port->mrs;
      it = fabric.mrs.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = fabric.cqs.begin(); it != fabric.cqs.end();) {
    it = it->second->context == context ? fabric.cqs.erase(it) : std::next(it);
  }
  for (auto it = fabric.pds.begin(); it != fabric.pds.end();) {
    it = it->second->context == context ? fabric.pds.erase(it) : std::next(it);
  }
  fabric.contexts.erase(verbs);
  return 0;
}

bool port_exists(const Fabric& fabric, uint8_t port) {
  return port >= 1 && port <= std::max(1, fabric.options.active_port);
}

bool port_active(const Fabric& fabric, const Context& context) {
  return fabric.options.ports_active && context.port->active;
}

int query_device(ibv_context* verbs, ibv_device_attr* attr) {
  Call call("query_device");
  Fabric& fabric = call.fabric();
  if (!Fabric::find(fabric.contexts, verbs) || !attr) return EINVAL;
  std::memset(attr, 0, sizeof(*attr));
  std::snprintf(attr->fw_ver, sizeof(attr->fw_ver), "fake");
  attr->max_mr_size = fabric.max_mr_bytes();
  attr->max_qp = fabric.options.max_qps;
  attr->max_qp_wr = fabric.strict() ? 4095 : 16384;
  attr->max_sge = fabric.strict() ? 1 : 4;
  attr->max_cq = 1024;
  attr->max_cqe = kMaxCqEntries;
  attr->max_mr = fabric.options.max_mrs;
  attr->max_pd = 1024;
  attr->phys_port_cnt = static_cast<uint8_t>(std::max(1, fabric.options.active_port));
  return 0;
}

int query_port(ibv_context* verbs, uint8_t port, ibv_port_attr* attr) {
  Call call("query_port");
  Fabric& fabric = call.fabric();
  Context* context = Fabric::find(fabric.contexts, verbs);
  if (!context || !port_exists(fabric, port) || !attr) return EINVAL;
  std::memset(attr, 0, sizeof(*attr));
  const bool active = port == fabric.options.active_port && port_active(fabric, *context);
  attr->state = active ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = IBV_MTU_1024;
  attr->gid_tbl_len = static_cast<int>(context->gids().size());
  attr->max_msg_sz = fabric.max_message();
  attr->pkey_tbl_len = 1;
  attr->active_width = 1;
  attr->active_speed = 32;
  attr->phys_state = active ? 5 : 3;  // LinkUp : Disabled
  attr->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

int query_gid(ibv_context* verbs, uint8_t port, int index, ibv_gid* gid) {
  Call call("query_gid");
  Fabric& fabric = call.fabric();
  Context* context = Fabric::find(fabric.contexts, verbs);
  if (!context || !port_exists(fabric, port) || !gid || index < 0 ||
      index >= static_cast<int>(context->gids().size())) {
    return EINVAL;
  }
  *gid = context->gids()[static_cast<size_t>(index)];
  return 0;
}

ibv_pd* alloc_pd(ibv_context* verbs) {
  Call call("alloc_pd");
  Fabric& fabric = call.fabric();
  Context* context = Fabric::find(fabric.contexts, verbs);
  if (!context) return fail<ibv_pd>(EINVAL);
  if (!port_active(fabric, *context)) return fail<ibv_pd>(EIO);
  auto pd = std::make_unique<Pd>();
  pd->context = context;
  pd->verbs.context = verbs;
  pd->verbs.handle = fabric.next_handle++;
  ibv_pd* handle = &pd->verbs;
  fabric.pds.emplace(handle, std::move(pd));
  return handle;
}

int dealloc_pd(ibv_pd* verbs) {
  Call call("dealloc_pd");
  Fabric& fabric = call.fabric();
  Pd* pd = Fabric::find(fabric.pds, verbs);
  if (!pd) return EINVAL;
  for (auto& [key, mr] : fabric.mrs) {
    if (mr->pd == pd) return EBUSY;
  }
  for (auto& [key, qp] : fabric.qps) {
    if (qp->pd == pd) return EBUSY;
  }
  fabric.pds.erase(verbs);
  return 0;
}

ibv_mr* reg_mr(ibv_pd* verbs, void* addr, size_t length, int access) {
  Call call("reg_mr");
  Fabric& fabric = call.fabric();
  Pd* pd = Fabric::find(fabric.pds, verbs);
  if (!pd || !addr || length == 0) return fail<ibv_mr>(EINVAL);
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
    return fail<ibv_mr>(EINVAL);
  }
  constexpr int kApplesAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  if (fabric.strict() && ((access & kApplesAccess) != kApplesAccess ||
                          reinterpret_cast<uintptr_t>(addr) % kPageBytes != 0)) {
    return fail<ibv_mr>(EINVAL);
  }
  if (pd->context->port->mrs >= fabric.options.max_mrs) return fail<ibv_mr>(ENOMEM);
  if (length > fabric.max_mr_bytes()) ++fabric.counters.oversized_registrations;
  auto mr = std::make_unique<Mr>();
  mr->pd = pd;
  mr->access = access;
  mr->verbs.context = pd->verbs.context;
  mr->verbs.pd = verbs;
  mr->verbs.addr = addr;
  mr->verbs.length = length;
  mr->verbs.handle = fabric.next_handle++;
  mr->verbs.lkey = mr->verbs.rkey = fabric.next_key++;
  ++pd->context->mrs;
  ++pd->context->port->mrs;
  ibv_mr* handle = &mr->verbs;
  fabric.mr_by_key[handle->lkey] = mr.get();
  fabric.mrs.emplace(handle, std::move(mr));
  return handle;
}

int dereg_mr(ibv_mr* verbs) {
  Call call("dereg_mr");
  Fabric& fabric = call.fabric();
  Mr* mr = Fabric::find(fabric.mrs, verbs);
  if (!mr) return EINVAL;
  --mr->pd->context->mrs;
  --mr->pd->context->port->mrs;
  fabric.mr_by_key.erase(verbs->lkey);
  fabric.mrs.erase(verbs);
  return 0;
}

ibv_cq* create_cq(ibv_context* verbs, int entries, void* user, ibv_comp_channel* channel, int /*vector*/) {
  Call call("create_cq");
  Fabric& fabric = call.fabric();
  Context* context = Fabric::find(fabric.contexts, verbs);
  if (!context || entries < 1 || entries > kMaxCqEntries) return fail<ibv_cq>(EINVAL);
  if (channel) return fail<ibv_cq>(EOPNOTSUPP);  // completion channels: not faked
  auto cq = std::make_unique<Cq>();
  cq->context = context;
  cq->verbs.context = verbs;
  cq->verbs.cq_context = user;
  cq->verbs.cqe = entries;
  cq->verbs.handle = fabric.next_handle++;
  ibv_cq* handle = &cq->verbs;
  fabric.cqs.emplace(handle, std::move(cq));
  return handle;
}

int destroy_cq(ibv_cq* verbs) {
  Call call("destroy_cq");
  Fabric& fabric = call.fabric();
  Cq* cq = Fabric::find(fabric.cqs, verbs);
  if (!cq) return EINVAL;
  for (auto& [key, qp] : fabric.qps) {
    if (qp->send_cq == cq || qp->recv_cq == cq) return EBUSY;
  }
  fabric.cqs.erase(verbs);
  return 0;
}

ibv_qp* create_qp(ibv_pd* verbs, ibv_qp_init_attr* attr) {
  Call call("create_qp");
  Fabric& fabric = call.fabric();
  Pd* pd = Fabric::find(fabric.pds, verbs);
  if (!pd || !attr) return fail<ibv_qp>(EINVAL);
  if (fabric.fail_create_qp != 0) {
    const int err = fabric.fail_create_qp;
    fabric.fail_create_qp = 0;
    return fail<ibv_qp>(err);
  }
  Cq* send_cq = Fabric::find(fabric.cqs, attr->send_cq);
  Cq* recv_cq = Fabric::find(fabric.cqs, attr->recv_cq);
  if (!send_cq || !recv_cq || send_cq->context != pd->context || recv_cq->context != pd->context) {
    return fail<ibv_qp>(EINVAL);
  }
  const bool type_ok = attr->qp_type == IBV_QPT_UC || (!fabric.strict() && attr->qp_type == IBV_QPT_RC);
  if (!type_ok || attr->srq) return fail<ibv_qp>(EOPNOTSUPP);
  const uint32_t max_wr = fabric.strict() ? 4095 : 16384;
  const uint32_t max_sge = fabric.strict() ? 1 : 4;
  const uint32_t max_inline = fabric.strict() ? 0 : 256;
  const ibv_qp_cap& cap = attr->cap;
  if (cap.max_send_wr > max_wr || cap.max_recv_wr > max_wr || cap.max_send_sge > max_sge ||
      cap.max_recv_sge > max_sge || cap.max_inline_data > max_inline) {
    return fail<ibv_qp>(EINVAL);
  }
  if (pd->context->port->qps >= fabric.options.max_qps) return fail<ibv_qp>(EBUSY);
  auto qp = std::make_unique<Qp>();
  qp->context = pd->context;
  qp->pd = pd;
  qp->send_cq = send_cq;
  qp->recv_cq = recv_cq;
  qp->cap = cap;
  if (fabric.options.max_granted_wr != 0) {
    qp->cap.max_send_wr = std::min(cap.max_send_wr, fabric.options.max_granted_wr);
    qp->cap.max_recv_wr = std::min(cap.max_recv_wr, fabric.options.max_granted_wr);
  }
  qp->cap.max_send_sge = std::max<uint32_t>(1, cap.max_send_sge);
  qp->cap.max_recv_sge = std::max<uint32_t>(1, cap.max_recv_sge);
  qp->sig_all = attr->sq_sig_all != 0;
  qp->verbs.context = pd->verbs.context;
  qp->verbs.qp_context = attr->qp_context;
  qp->verbs.pd = verbs;
  qp->verbs.send_cq = attr->send_cq;
  qp->verbs.recv_cq = attr->recv_cq;
  qp->verbs.handle = fabric.next_handle++;
  qp->verbs.qp_num = fabric.next_qpn++;
  qp->verbs.state = IBV_QPS_RESET;
  qp->verbs.qp_type = attr->qp_type;
  attr->cap = qp->cap;
  ++pd->context->qps;
  ++pd->context->port->qps;
  ibv_qp* handle = &qp->verbs;
  fabric.qp_by_number[handle->qp_num] = qp.get();
  fabric.qps.emplace(handle, std::move(qp));
  return handle;
}

// The attribute masks of the kernel's ib_modify_qp_is_ok() for UC and RC.
bool mask_ok(ibv_qp_state from, ibv_qp_state to, bool rc, int mask) {
  int required = IBV_QP_STATE;
  int optional = 0;
  if (from == IBV_QPS_RESET && to == IBV_QPS_ERR) {
    return false;  // the kernel's table has no RESET -> ERR
  } else if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
  } else if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
    required |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  } else if (from == IBV_QPS_INIT && to == IBV_QPS_INIT) {
    optional = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  } else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    required |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (rc) required |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    optional = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
  } else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
    required |= IBV_QP_SQ_PSN;
    if (rc) required |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    optional = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE;
    if (rc) optional |= IBV_QP_MIN_RNR_TIMER;
  } else if (from == IBV_QPS_RTS && to == IBV_QPS_RTS) {
    optional = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE;
    if (rc) optional |= IBV_QP_MIN_RNR_TIMER;
  } else {
    return false;
  }
  return (mask & required) == required && (mask & ~(required | optional)) == 0;
}

int modify_qp(ibv_qp* verbs, ibv_qp_attr* attr, int mask) {
  Call call("modify_qp");
  Fabric& fabric = call.fabric();
  Qp* qp = Fabric::find(fabric.qps, verbs);
  if (!qp || !attr || !(mask & IBV_QP_STATE)) return EINVAL;
  const ibv_qp_state to = attr->qp_state;
  if (!mask_ok(verbs->state, to, verbs->qp_type == IBV_QPT_RC, mask)) return EINVAL;
  if ((mask & IBV_QP_PORT) && attr->port_num != fabric.options.active_port) return EINVAL;
  if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) && (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096)) return EINVAL;
  if (mask & IBV_QP_AV) {
    const ibv_ah_attr& ah = attr->ah_attr;
    const int sgid = ah.grh.sgid_index;
    const std::vector<ibv_gid>& gids = qp->context->gids();
    if (!ah.is_global || ah.port_num != fabric.options.active_port || sgid >= static_cast<int>(gids.size())) {
      return EINVAL;
    }
    const bool source_ok = fabric.strict() ? sgid == fabric.options.ipv4_gid_index : !is_zero(gids[sgid]);
    // Apple addresses a peer by its IPv4-mapped GID alone.
    const Context* owner = owner_of_gid(fabric, ah.grh.dgid);
    const bool destination_ok = owner != nullptr && (!fabric.strict() || is_ipv4_mapped(ah.grh.dgid));
    if (!source_ok || !destination_ok) return EINVAL;
    if (!reaches(fabric, *qp->context->port, *owner->port)) return ETIMEDOUT;  // no cable there
    qp->dgid = ah.grh.dgid;
  }
  if (mask & IBV_QP_DEST_QPN) qp->dest_qpn = attr->dest_qp_num;
  if (mask & IBV_QP_TIMEOUT) qp->timeout = attr->timeout;
  if (mask & IBV_QP_RETRY_CNT) qp->retry_cnt = attr->retry_cnt;
  if (to == IBV_QPS_ERR) {
    enter_error(qp);
  } else if (to == IBV_QPS_RESET) {
    fabric.counters.queued_rc -= qp->queued.size();
    qp->queued.clear();
    qp->recvs.clear();
    qp->recv_frames = 0;
    qp->send_queue.clear();
    qp->send_places = 0;
  }
  verbs->state = to;
  return 0;
}

int destroy_qp(ibv_qp* verbs) {
  Call call("destroy_qp");
  Fabric& fabric = call.fabric();
  Qp* qp = Fabric::find(fabric.qps, verbs);
  if (!qp) return EINVAL;
  --qp->context->qps;
  --qp->context->port->qps;
  fabric.counters.queued_rc -= qp->queued.size();
  fabric.qp_by_number.erase(verbs->qp_num);
  fabric.qps.erase(verbs);
  return 0;
}

int post_send(ibv_qp* verbs, ibv_send_wr* wr, ibv_send_wr** bad) {
  Call call("post_send");
  if (verbs) call.pause_point(verbs->context);
  Fabric& fabric = call.fabric();
  Qp* qp = Fabric::find(fabric.qps, verbs);
  for (; wr != nullptr; wr = wr->next) {
    if (bad) *bad = wr;
    if (!qp) return post_error(fabric, EINVAL);
    if (qp->context->vanished) {
      ++fabric.counters.dropped_injected;
      continue;
    }
    if (verbs->state == IBV_QPS_ERR) {
      push(qp->send_cq, completion(qp, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 0));
      continue;
    }
    if (verbs->state != IBV_QPS_RTS) return post_error(fabric, EINVAL);
    const bool opcode_ok =
        wr->opcode == IBV_WR_SEND ||
        (!fabric.strict() && (wr->opcode == IBV_WR_SEND_WITH_IMM || wr->opcode == IBV_WR_RDMA_WRITE ||
                              wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM));
    if (!opcode_ok || wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->cap.max_send_sge ||
        (wr->num_sge > 0 && !wr->sg_list)) {
      return post_error(fabric, EINVAL);
    }
    if (fabric.strict() && fabric.options.aligned_sends) {
      for (int i = 0; i < wr->num_sge; ++i) {
        if (wr->sg_list[i].addr % kFrameBytes != 0) return post_error(fabric, EINVAL);
      }
    }
    uint64_t length = 0;
    for (int i = 0; i < wr->num_sge; ++i) length += wr->sg_list[i].length;
    if (length > fabric.max_message()) return post_error(fabric, EINVAL);
    if ((wr->send_flags & IBV_SEND_INLINE) && length > qp->cap.max_inline_data) return post_error(fabric, EINVAL);
    const uint64_t places = fabric.strict() ? frames(length) : 1;
    if (qp->send_places + places > qp->cap.max_send_wr) return post_error(fabric, ENOMEM);
    qp->sending_seq = qp->next_send_seq++;
    qp->send_queue.emplace_back(qp->sending_seq, places);
    qp->send_places += places;
    transmit(fabric, qp, wr, length);
  }
  if (bad) *bad = nullptr;
  return 0;
}

int post_recv(ibv_qp* verbs, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Call call("post_recv");
  if (verbs) call.pause_point(verbs->context);
  Fabric& fabric = call.fabric();
  Qp* qp = Fabric::find(fabric.qps, verbs);
  for (; wr != nullptr; wr = wr->next) {
    if (bad) *bad = wr;
    if (!qp) return post_error(fabric, EINVAL);
    if (qp->context->vanished) continue;
    const ibv_qp_state state = verbs->state;
    if (state == IBV_QPS_ERR) {
      push(qp->recv_cq, completion(qp, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0));
      continue;
    }
    const bool state_ok =
        fabric.strict() ? state == IBV_QPS_RTS : state == IBV_QPS_INIT || state == IBV_QPS_RTR || state == IBV_QPS_RTS;
    if (!state_ok || wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > qp->cap.max_recv_sge ||
        (wr->num_sge > 0 && !wr->sg_list)) {
      return post_error(fabric, EINVAL);
    }
    RecvWr recv;
    recv.wr_id = wr->wr_id;
    recv.sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
    for (const ibv_sge& sge : recv.sges) recv.length += sge.length;
    if (recv.length > fabric.max_message()) return post_error(fabric, EINVAL);
    recv.keys_ok = keys_ok(fabric, qp->pd, wr->sg_list, wr->num_sge, true);
    // Apple counts the receive queue in 4 KiB frames; others count WRs.
    const uint64_t places = fabric.strict() ? qp->recv_frames + frames(recv.length) : qp->recvs.size() + 1;
    if (places > qp->cap.max_recv_wr ||
        (fabric.strict() && qp->recvs.size() + 1 > static_cast<size_t>(fabric.options.max_outstanding_recvs))) {
      return post_error(fabric, ENOMEM);
    }
    qp->recv_frames += frames(recv.length);
    qp->recvs.push_back(std::move(recv));
    drain_queue(fabric, qp);
  }
  if (bad) *bad = nullptr;
  return 0;
}

int poll_cq(ibv_cq* verbs, int entries, ibv_wc* wc) {
  Call call("poll_cq");
  if (verbs) call.pause_point(verbs->context);
  Fabric& fabric = call.fabric();
  Cq* cq = Fabric::find(fabric.cqs, verbs);
  if (!cq || entries < 0 || (entries > 0 && !wc)) return -1;
  if (cq->context->vanished) return 0;
  fire_due_retries(fabric, cq);
  if (cq->overrun) return -1;
  int n = 0;
  for (; n < entries && !cq->entries.empty(); ++n) {
    const CqEntry entry = cq->entries.front();
    cq->entries.pop_front();
    wc[n] = entry.wc;
    // A polled send completion frees the places of its WR and of the unsignaled ones before it.
    auto qp = fabric.qp_by_number.find(entry.wc.qp_num);
    if (entry.send_seq == 0 || qp == fabric.qp_by_number.end()) continue;
    auto& queue = qp->second->send_queue;
    while (!queue.empty() && queue.front().first <= entry.send_seq) {
      qp->second->send_places -= queue.front().second;
      queue.pop_front();
    }
  }
  return n;
}

bool open_scope(std::string* scope) {
  if (g_thread_host < 0) return false;
  *scope = "fabric " + std::to_string(g_generation.load()) + " host " + std::to_string(g_thread_host);
  return true;
}

int ipv4_prefix(const uint8_t ipv4[4]) {
  Call call("ipv4_prefix");
  for (const auto& [key, port] : call.fabric().ports) {
    for (const ibv_gid& gid : port->gids) {
      if (is_ipv4_mapped(gid) && std::memcmp(gid.raw + 12, ipv4, 4) == 0) return port->prefix;
    }
  }
  return -1;
}

const VerbsApi kApi = [] {
  VerbsApi api;
  api.provider = "fake";
  api.get_device_list = get_device_list;
  api.free_device_list = free_device_list;
  api.get_device_name = get_device_name;
  api.open_device = open_device;
  api.close_device = close_device;
  api.query_port = query_port;
  api.query_gid = query_gid;
  api.query_device = query_device;
  api.alloc_pd = alloc_pd;
  api.dealloc_pd = dealloc_pd;
  api.reg_mr = reg_mr;
  api.dereg_mr = dereg_mr;
  api.create_cq = create_cq;
  api.destroy_cq = destroy_cq;
  api.create_qp = create_qp;
  api.modify_qp = modify_qp;
  api.destroy_qp = destroy_qp;
  api.post_send = post_send;
  api.post_recv = post_recv;
  api.poll_cq = poll_cq;
  api.ipv4_prefix = ipv4_prefix;
  api.open_scope = open_scope;
  return api;
}();

}  // namespace

void reset(const Options& options) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_fabric = make_fabric(options);
    ++g_generation;
    g_provider_ticks = 0;
  }
  g_resumed.notify_all();  // (a call a pause held sees no context of its own any more)
}

void detail::with_fabric(const std::function<void(Fabric&)>& fn) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    fn(locked_fabric());
  }
  g_resumed.notify_all();
}

const VerbsApi* verbs() { return &kApi; }

void watch_sends_from(const void* begin, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Fabric& fabric = locked_fabric();
  fabric.watch_begin = reinterpret_cast<uintptr_t>(begin);
  fabric.watch_end = fabric.watch_begin + bytes;
}

void drop_next_sends(int n) {
  std::lock_guard<std::mutex> lock(g_mutex);
  locked_fabric().drop_sends = n;
}

void corrupt_next_sends(int n) {
  std::lock_guard<std::mutex> lock(g_mutex);
  locked_fabric().corrupt_sends = n;
}

void fail_next_send_completion(ibv_wc_status status) {
  std::lock_guard<std::mutex> lock(g_mutex);
  locked_fabric().fail_send = true;
  locked_fabric().fail_send_status = status;
}

void fail_next_create_qp(int err) {
  std::lock_guard<std::mutex> lock(g_mutex);
  locked_fabric().fail_create_qp = err;
}

void vanish(ibv_context* verbs) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Fabric& fabric = locked_fabric();
  Context* context = Fabric::find(fabric.contexts, verbs);
  if (!context) return;
  context->vanished = true;
  for (auto& [key, cq] : fabric.cqs) {
    if (cq->context == context) cq->entries.clear();
  }
}

std::map<std::string, uint64_t> calls() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return locked_fabric().calls;
}

void clear_calls() {
  std::lock_guard<std::mutex> lock(g_mutex);
  locked_fabric().calls.clear();
}

Counters counters() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return locked_fabric().counters;
}

int live_qps(ibv_context* verbs) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Context* context = Fabric::find(locked_fabric().contexts, verbs);
  return context ? context->qps : -1;
}

int live_mrs(ibv_context* verbs) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Context* context = Fabric::find(locked_fabric().contexts, verbs);
  return context ? context->mrs : -1;
}

int port_qps(ibv_context* verbs) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Context* context = Fabric::find(locked_fabric().contexts, verbs);
  return context ? context->port->qps : -1;
}

void set_thread_host(int host) { g_thread_host = host < 0 ? -1 : host; }

double provider_ns() { return static_cast<double>(g_provider_ticks.load()) * ns_per_tick(); }

void clear_provider_time() { g_provider_ticks = 0; }

}  // namespace tbcoll::ibverbs::fake