// The fuzz corpus's ibverbs handshake seeds (fuzz/corpus/ibverbs_handshake, written by fuzz/make_corpus.cc) are in
// today's formats: a seed the parsers refuse for being out of date only exercises the refusal. Regenerate them with
// tools/fuzz.sh --seeds when the hello or the port address changes.
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tbcoll/error.hpp"
#include "transports/ibverbs/port.h"
#include "transports/ibverbs/wire.h"

namespace tbcoll::ibverbs {
namespace {

std::string seed(const std::string& name) {
  std::ifstream in(std::string(TBCOLL_SOURCE_DIR) + "/fuzz/corpus/ibverbs_handshake/seed-" + name, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// The target's layout: a Hello, a Notice, then a port address.
constexpr size_t kAddressAt = sizeof(wire::Hello) + sizeof(wire::Notice);

TEST(FuzzSeeds, IbverbsHandshakeSeedsUseTodaysFormats) {
  for (const char* name : {"hello-notice-address", "v6-address", "auto-mode"}) {
    SCOPED_TRACE(name);
    const std::string bytes = seed(name);
    ASSERT_GT(bytes.size(), kAddressAt) << "missing: run tools/fuzz.sh --seeds";
    wire::Hello hello;
    std::memcpy(&hello, bytes.data(), sizeof(hello));
    EXPECT_TRUE(wire::hello_acceptable(hello)) << "hello of version " << hello.version << ", today " << wire::kVersion;
    const std::string address = bytes.substr(kAddressAt);
    EXPECT_NO_THROW(Port::parse(address)) << address;
  }
  // The refusals stay refusals.
  for (const char* name : {"old-address", "bad-mode", "bad-version"}) {
    SCOPED_TRACE(name);
    const std::string bytes = seed(name);
    ASSERT_GT(bytes.size(), kAddressAt);
    EXPECT_THROW(Port::parse(bytes.substr(kAddressAt)), InvalidArgument);
  }
}

}  // namespace
}  // namespace tbcoll::ibverbs
