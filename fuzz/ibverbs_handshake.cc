// Fuzz target: the ibverbs side channel's handshake and notices (transports/ibverbs/wire.h) and the port address
// a rank publishes for it ("key|host:port|device|mode[+auto]", Port::parse).
//   - Any bytes as a Hello: hello_acceptable leaves both keys NUL-terminated within their arrays, and accepts only
//     this magic and version with a token of at most kMaxTokenBytes and a usable slot size.
//   - A Hello built from the input round-trips through its bytes.
//   - Any text as a port address: parsed into key, side channel and device that join back into the address, or
//     refused with InvalidArgument (no other exception); a side channel that parses goes through parse_host_port.
#include "fuzz_support.h"
#include "common/net.h"
#include "tbcoll/error.hpp"
#include "transports/ibverbs/port.h"
#include "transports/ibverbs/wire.h"

namespace wire = tbcoll::ibverbs::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tbcoll_fuzz::Reader in(data, size);
  wire::Hello hello = in.take<wire::Hello>();
  const wire::Hello sent = hello;
  const bool acceptable = wire::hello_acceptable(hello);
  FUZZ_CHECK(std::memchr(hello.key, '\0', sizeof(hello.key)) != nullptr);
  FUZZ_CHECK(std::memchr(hello.peer_key, '\0', sizeof(hello.peer_key)) != nullptr);
  FUZZ_CHECK(acceptable == (sent.magic == wire::kHelloMagic && sent.version == wire::kVersion &&
                            sent.token_bytes <= wire::kMaxTokenBytes && sent.slot_bytes >= wire::kMinSlotBytes &&
                            sent.slot_bytes <= wire::kMaxSlotBytes && sent.slot_bytes % wire::kFrameBytes == 0));
  // Only the last byte of each key is touched.
  FUZZ_CHECK(std::memcmp(hello.key, sent.key, sizeof(hello.key) - 1) == 0);
  FUZZ_CHECK(std::memcmp(hello.gid, sent.gid, sizeof(hello.gid)) == 0 && hello.qp_num == sent.qp_num);
  const std::string key = hello.key;
  FUZZ_CHECK(key.size() < wire::kMaxKeyBytes);

  const wire::Notice notice = in.take<wire::Notice>();
  wire::Notice copy;
  std::memcpy(&copy, &notice, sizeof(copy));
  FUZZ_CHECK(copy.kind == notice.kind && copy.comm_id == notice.comm_id);

  const std::string address = in.rest();
  std::string side_channel;
  try {
    const tbcoll::ibverbs::PortAddress parsed = tbcoll::ibverbs::Port::parse(address);
    const std::string& port_key = parsed.key;
    side_channel = parsed.side_channel;
    FUZZ_CHECK(!port_key.empty() && port_key.size() < wire::kMaxKeyBytes && !side_channel.empty());
    const std::string mode = std::string(parsed.mode == tbcoll::ibverbs::Mode::kRc ? "rc" : "uc") +
                             (parsed.auto_mode ? "+auto" : "");
    FUZZ_CHECK(port_key + "|" + side_channel + "|" + parsed.device + "|" + mode == address);
    FUZZ_CHECK(port_key.find('|') == std::string::npos && side_channel.find('|') == std::string::npos);
  } catch (const tbcoll::InvalidArgument&) {
    return 0;
  }
  try {
    const tbcoll::net::HostPort where = tbcoll::net::parse_host_port(side_channel, "ibverbs side channel");
    FUZZ_CHECK(where.port >= 0 && where.port <= 65535);
  } catch (const tbcoll::InvalidArgument&) {
  }
  return 0;
}
