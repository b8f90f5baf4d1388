// Fuzz target: the rendezvous records (src/bootstrap/rendezvous.*) and the addresses ranks publish in them.
//   - Any text as a rank's record: decode gives a record or IoError (nothing else), and the record it gives
//     encodes to a text that decodes to the same record (decode(encode(x)) == x; records decoded beyond an int's
//     world size, marked -1, are never encoded by a rank and are left out).
//   - A record built from the input's fields (what a rank may publish) decodes back to itself.
//   - record_number accepts exactly unsigned decimal numbers within 64 bits; parse_host_port (the tcp transport's
//     and the store's addresses) and parse_cpus refuse anything else with InvalidArgument.
#include <vector>

#include "bootstrap/rendezvous.h"
#include "common/cpu.h"
#include "common/net.h"
#include "fuzz_support.h"
#include "platform/platform.h"
#include "tbcoll/error.hpp"

namespace bs = tbcoll::bootstrap;

namespace {

bool same(const bs::Published& a, const bs::Published& b) {
  return a.info.rank == b.info.rank && a.info.host_id == b.info.host_id && a.info.process_id == b.info.process_id &&
         a.kernel == b.kernel && a.cpus == b.cpus && a.world_size == b.world_size && a.addresses == b.addresses;
}

// A text field a rank may write: no line breaks (the record is one field a line).
std::string field(tbcoll_fuzz::Reader& in, bool no_equals) {
  std::string text = in.bytes(in.take<uint8_t>() % 48);
  for (char& c : text) {
    if (c == '\n' || (no_equals && c == '=')) c = '_';
  }
  return text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const bs::Published decoded = bs::decode(3, text);
    if (decoded.world_size >= 0) FUZZ_CHECK(same(bs::decode(3, bs::encode(decoded)), decoded));
  } catch (const tbcoll::IoError&) {
  }

  tbcoll_fuzz::Reader in(data, size);
  bs::Published made;
  made.info.rank = 5;
  made.info.host_id = field(in, false);
  made.info.process_id = in.take<uint64_t>();
  made.kernel = field(in, false);
  made.world_size = static_cast<int>(in.take<uint32_t>() & 0x7fffffff);
  for (int n = in.take<uint8_t>() % 8; n > 0; --n) made.cpus.push_back(in.take<uint16_t>() % tbcoll::platform::kMaxCpus);
  std::sort(made.cpus.begin(), made.cpus.end());
  made.cpus.erase(std::unique(made.cpus.begin(), made.cpus.end()), made.cpus.end());
  for (int n = in.take<uint8_t>() % 4; n > 0; --n) {
    const std::string device = field(in, true);
    made.addresses[device] = field(in, false);
  }
  FUZZ_CHECK(same(bs::decode(5, bs::encode(made)), made));
  FUZZ_CHECK(tbcoll::parse_cpus(tbcoll::format_cpus(made.cpus)) == made.cpus);

  const std::string word = text.substr(0, 40);
  try {
    const uint64_t number = bs::record_number(word, "fuzz");
    FUZZ_CHECK(!word.empty() && word.find_first_not_of("0123456789") == std::string::npos);
    const size_t digits = word.find_first_not_of('0');
    FUZZ_CHECK(std::to_string(number) == (digits == std::string::npos ? "0" : word.substr(digits)));
  } catch (const tbcoll::IoError&) {
    FUZZ_CHECK(word.empty() || word.find_first_not_of("0123456789") != std::string::npos || word.size() >= 20);
  }
  try {
    const tbcoll::net::HostPort where = tbcoll::net::parse_host_port(text, "fuzz address");
    FUZZ_CHECK(where.port >= 0 && where.port <= 65535);
  } catch (const tbcoll::InvalidArgument&) {
  }
  try {
    const std::vector<int> cpus = tbcoll::parse_cpus(text.substr(0, 256));
    FUZZ_CHECK(std::is_sorted(cpus.begin(), cpus.end()));
    for (int cpu : cpus) FUZZ_CHECK(cpu >= 0 && cpu < tbcoll::platform::kMaxCpus);
  } catch (const tbcoll::InvalidArgument&) {
  }
  return 0;
}
