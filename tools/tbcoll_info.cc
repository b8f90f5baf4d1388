// tbcoll-info: prints the version, the transports in this build and every TBCOLL_* knob with its default,
// its current value and a line of help.
#include <cstdio>
#include <cstring>

#include "common/env.h"
#include "tbcoll/transport.h"

int main(int argc, char** argv) {
  if (argc > 1) {
    const bool help = std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0;
    if (!help) std::fprintf(stderr, "tbcoll-info: unknown argument '%s'\n", argv[1]);
    std::fprintf(help ? stdout : stderr, "usage: tbcoll-info   (prints transports and every TBCOLL_* knob)\n");
    return help ? 0 : 2;
  }
  std::printf("tbcoll %s\n\ntransports in this build (best first):\n", TBCOLL_VERSION);
  for (const auto& device : tbcoll::transport::available_devices()) {
    auto caps = device->capabilities();
    std::printf("  %-10s ~%.1f us, ~%.1f GB/s%s\n", device->name().c_str(), caps.latency_us, caps.bandwidth_gbps,
                caps.same_process_only ? " (ranks in one process)" : caps.same_host_only ? " (same host)" : "");
  }
  std::printf("\nknobs (environment variables):\n");
  for (const auto& knob : tbcoll::env::knobs()) {
    std::string value = tbcoll::env::get(knob.name);
    std::printf("  %-27s default %-10s now %-10s %s\n", knob.name,
                knob.default_value[0] ? knob.default_value : "(unset)",
                tbcoll::env::is_set(knob.name) ? value.c_str() : "-", knob.help);
  }
  return 0;
}
