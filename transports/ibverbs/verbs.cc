// The system's verbs through dlopen: the library is optional at run time.
#include "transports/ibverbs/verbs.h"

#include <dlfcn.h>
#include <errno.h>

#include <cstring>

#include <fmt/format.h>

#include "platform/platform.h"

namespace tbcoll::ibverbs {
namespace {

// The library's own symbol for the call that verbs.h turns into a macro or an inline wrapper.
using QueryPortSymbol = int (*)(ibv_context*, uint8_t, ibv_port_attr*);
using RegMrSymbol = ibv_mr* (*)(ibv_pd*, void*, size_t, int);

QueryPortSymbol query_port_symbol = nullptr;

int query_port(ibv_context* context, uint8_t port, ibv_port_attr* attr) {
  // The exported ibv_query_port fills the older, shorter layout: zero the rest.
  std::memset(attr, 0, sizeof(*attr));
  return query_port_symbol(context, port, attr);
}

// The data path: the header's own inline functions (rdma-core's dispatch through the provider's ops; Apple's SDK
// defines its own), never the ops table by hand.
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) { return ibv_post_send(qp, wr, bad); }
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) { return ibv_post_recv(qp, wr, bad); }
int poll_cq(ibv_cq* cq, int entries, ibv_wc* wc) { return ibv_poll_cq(cq, entries, wc); }

int ipv4_prefix(const uint8_t ipv4[4]) {
  const std::string text = fmt::format("{}.{}.{}.{}", ipv4[0], ipv4[1], ipv4[2], ipv4[3]);
  for (const platform::NetworkInterface& entry : platform::network_interfaces()) {
    if (!entry.ipv6 && entry.address == text) return entry.prefix;
  }
  return -1;
}

template <typename Fn>
void bind(void* library, const char* name, Fn* fn, std::string* missing) {
  *fn = reinterpret_cast<Fn>(dlsym(library, name));
  if (*fn == nullptr && missing->empty()) *missing = name;
}

struct Loaded {
  VerbsApi api;
  std::string why_not;
  bool ok = false;
};

// The first of the platform's libraries that loads; "" in *tried's entries say why the others did not.
void* open_library(std::string* name, std::string* tried) {
  for (const std::string& candidate : platform::verbs_libraries()) {
    void* library = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) {
      *name = candidate;
      return library;
    }
    const char* error = dlerror();
    *tried += fmt::format("{}{}: {}", tried->empty() ? "" : "; ", candidate, error != nullptr ? error : "not found");
  }
  return nullptr;
}

Loaded load() {
  Loaded out;
  std::string name, tried;
  void* library = open_library(&name, &tried);
  if (library == nullptr) {
    out.why_not = fmt::format("no verbs library ({})", tried);
    return out;
  }
  VerbsApi& api = out.api;
  api.provider = name;
  std::string missing;
  bind(library, "ibv_get_device_list", &api.get_device_list, &missing);
  bind(library, "ibv_free_device_list", &api.free_device_list, &missing);
  bind(library, "ibv_get_device_name", &api.get_device_name, &missing);
  bind(library, "ibv_open_device", &api.open_device, &missing);
  bind(library, "ibv_close_device", &api.close_device, &missing);
  bind(library, "ibv_query_device", &api.query_device, &missing);
  bind(library, "ibv_query_port", &query_port_symbol, &missing);
  bind(library, "ibv_query_gid", &api.query_gid, &missing);
  bind(library, "ibv_alloc_pd", &api.alloc_pd, &missing);
  bind(library, "ibv_dealloc_pd", &api.dealloc_pd, &missing);
  RegMrSymbol reg_mr = nullptr;
  bind(library, "ibv_reg_mr", &reg_mr, &missing);
  api.reg_mr = reg_mr;
  bind(library, "ibv_dereg_mr", &api.dereg_mr, &missing);
  bind(library, "ibv_create_cq", &api.create_cq, &missing);
  bind(library, "ibv_destroy_cq", &api.destroy_cq, &missing);
  bind(library, "ibv_create_qp", &api.create_qp, &missing);
  bind(library, "ibv_modify_qp", &api.modify_qp, &missing);
  bind(library, "ibv_destroy_qp", &api.destroy_qp, &missing);
  if (!missing.empty()) {
    out.why_not = fmt::format("{} lacks {}", name, missing);
    return out;  // the library stays loaded: unloading a verbs provider is not safe in every version
  }
  api.query_port = query_port;
  api.post_send = post_send;
  api.post_recv = post_recv;
  api.poll_cq = poll_cq;
  api.ipv4_prefix = ipv4_prefix;
  out.ok = true;
  return out;
}

}  // namespace

int error_of(int returned) {
  if (returned == -1) return errno != 0 ? errno : EIO;
  if (returned < 0) return -returned;
  return returned != 0 ? returned : EIO;
}

bool apple_device(const VerbsApi& verbs, const std::string& device) {
  return verbs.provider.find("librdma") != std::string::npos || device.rfind("rdma_en", 0) == 0;
}

const VerbsApi* system_verbs(std::string* why_not) {
  static const Loaded loaded = load();
  if (!loaded.ok && why_not != nullptr) *why_not = loaded.why_not;
  return loaded.ok ? &loaded.api : nullptr;
}

const char* wc_status_name(int status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return "IBV_WC_SUCCESS";
    case IBV_WC_LOC_LEN_ERR:
      return "IBV_WC_LOC_LEN_ERR (local length error: send and receive sizes differ)";
    case IBV_WC_LOC_QP_OP_ERR:
      return "IBV_WC_LOC_QP_OP_ERR";
    case IBV_WC_LOC_PROT_ERR:
      return "IBV_WC_LOC_PROT_ERR (local protection error: buffer outside its MR)";
    case IBV_WC_WR_FLUSH_ERR:
      return "IBV_WC_WR_FLUSH_ERR (queue pair in error: flushed)";
    case IBV_WC_REM_INV_REQ_ERR:
      return "IBV_WC_REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR:
      return "IBV_WC_REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR:
      return "IBV_WC_REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR:
      return "IBV_WC_RETRY_EXC_ERR (retries exceeded: the peer does not answer)";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "IBV_WC_RNR_RETRY_EXC_ERR (the peer had no receive posted)";
    case IBV_WC_GENERAL_ERR:
      return "IBV_WC_GENERAL_ERR";
    default:
      return "IBV_WC_? (see ibv_wc_status)";
  }
}

}  // namespace tbcoll::ibverbs
