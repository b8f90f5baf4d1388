// tbcoll-info: prints the version, the platform layer and reduce kernels in use, the transports in this build (and
// why a built one is not usable here), the algorithms of every collective (the algorithm table and the transports'
// fast paths) and every TBCOLL_* knob with its default, its current value (never a secret's) and a line of help,
// then the TBCOLL_* variables of the environment that are no knob.
#include <cstdio>
#include <cstring>

#include "algorithms/registry.h"
#include "common/env.h"
#include "platform/platform.h"
#include "reduce/reduce.h"
#include "tbcoll/transport.hpp"
#include "transports/delay/emulation.h"
#ifdef TBCOLL_INFO_IBVERBS
#include "tools/rdma_diag/preflight.h"
#endif

namespace {

// A transport compiled in but not offered here: why (ibverbs without a library or a device, say).
void print_unusable_transports(const std::vector<std::shared_ptr<tbcoll::transport::Device>>& devices) {
  bool offered = false;
  for (const auto& device : devices) offered = offered || device->name() == "ibverbs";
  if (offered) return;
#ifdef TBCOLL_INFO_IBVERBS
  std::string why;
  const tbcoll::ibverbs::VerbsApi* verbs = tbcoll::ibverbs::system_verbs(&why);
  const tbcoll::ibverbs::PreflightReport report = tbcoll::ibverbs::preflight(verbs, why);
  std::printf("  %-10s built, not usable here: %s%s%s\n", "ibverbs",
              report.problem.empty() ? "no usable device" : report.problem.c_str(), report.fix.empty() ? "" : "; ",
              report.fix.c_str());
#else
  std::printf("  %-10s not built (needs infiniband/verbs.h at build time: libibverbs-dev, rdma-core)\n", "ibverbs");
#endif
}

int usage_error(const char* argument) {
  std::fprintf(stderr, "tbcoll-info: unknown argument '%s' (try tbcoll-info --help)\n", argument);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    if (std::strcmp(argv[1], "--version") == 0) {
      std::printf("tbcoll-info %s\n", TBCOLL_VERSION);
      return 0;
    }
    if (std::strcmp(argv[1], "-h") != 0 && std::strcmp(argv[1], "--help") != 0) return usage_error(argv[1]);
    std::printf("usage: tbcoll-info [--version]   (prints transports, algorithms and every TBCOLL_* knob)\n");
    return 0;
  }
  std::printf("tbcoll %s\nplatform layer %s, reduce kernels %s\n\ntransports in this build (best first):\n",
              TBCOLL_VERSION, tbcoll::platform::flavour(), tbcoll::reduce::isa_name(tbcoll::reduce::best_isa()));
  try {
    tbcoll::transport::available_devices();  // loads TBCOLL_TRANSPORT_PLUGINS: a plug-in refused is named here
  } catch (const tbcoll::Error& error) {
    std::fprintf(stderr, "tbcoll-info: %s\n", error.what());
    return 1;
  }
  for (const auto& device : tbcoll::transport::available_devices()) {
    auto caps = device->capabilities();
    std::printf("  %-10s ~%.1f us, ~%.1f GB/s%s\n", device->name().c_str(), caps.latency_us, caps.bandwidth_gbps,
                caps.same_process_only ? " (ranks in one process)" : caps.same_host_only ? " (same host)" : "");
  }
  print_unusable_transports(tbcoll::transport::available_devices());
  std::printf("\nalgorithms (TBCOLL_ALGO=name, or collective:name; the tuner asks them in this order):\n");
  const auto devices = tbcoll::transport::available_devices();
  for (tbcoll::OpKind kind : tbcoll::algo::collectives()) {
    std::printf("  %s\n", tbcoll::op_kind_name(kind));
    for (const auto& device : devices) {
      for (const auto& fast : device->fast_path_algorithms()) {
        if (fast.kind != kind) continue;
        const std::string name = fast.name + " (" + device->name() + ")";
        std::printf("    %-18s %s\n", name.c_str(), fast.description.c_str());
      }
    }
    for (const auto& row : tbcoll::algo::algorithms_for(kind)) std::printf("    %-18s %s\n", row.name, row.description);
  }
  std::printf(
      "\nlink emulation presets (TBCOLL_LINK_EMULATION=name, or latency_us=N,gbps=N; on top of the real "
      "transport's own time):\n");
  for (const auto& preset : tbcoll::transport::link_presets()) {
    std::printf("  %-10s +%g us one way, %g Gbit/s (%.2f GB/s) per direction per peer\n             assumes: %s\n",
                preset.name.c_str(), preset.latency_us, preset.gbit_per_s, preset.gbit_per_s / 8,
                preset.assumes.c_str());
  }
  try {
    const auto now = tbcoll::transport::parse_link_emulation(tbcoll::env::get("TBCOLL_LINK_EMULATION"),
                                                             tbcoll::env::get_int("TBCOLL_LINK_DELAY_US"));
    std::printf("  now: %s\n", now.describe().c_str());
  } catch (const tbcoll::Error& error) {
    std::printf("  now: invalid: %s\n", error.what());
  }
  std::printf("\nknobs (environment variables):\n");
  for (const auto& knob : tbcoll::env::knobs()) {
    const std::string value = tbcoll::env::printable(knob.name, tbcoll::env::get(knob.name));
    std::printf("  %-27s default %-10s now %-10s %s\n", knob.name,
                knob.default_value[0] ? knob.default_value : "(unset)",
                tbcoll::env::is_set(knob.name) ? value.c_str() : "-", knob.help);
  }
  std::printf("\nvariables of tbcoll's tools (not knobs of the library):\n");
  for (const auto& variable : tbcoll::env::tool_variables()) std::printf("  %-27s %s\n", variable.name, variable.help);
  const auto unknown = tbcoll::env::unknown_variables(tbcoll::platform::environment_names());
  if (!unknown.empty()) {
    std::printf("\nTBCOLL_* variables set here that tbcoll does not know (ignored):\n");
    for (const auto& name : unknown) std::printf("  %s\n", name.c_str());
  }
  return 0;
}
