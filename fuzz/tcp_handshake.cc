// Fuzz target: the tcp transport's connection handshake (transports/tcp/wire.h), as the acceptor parses it.
//   - Any bytes, fed in pieces of any sizes as a socket delivers them: parse_hello never asks for bytes beyond the
//     handshake's length, reaches the same verdict however the bytes are cut, and once complete gives back the
//     Hello and token those bytes hold.
//   - judge_hello accepts exactly the Hello built from this side's own expectations (encode, then parse, then judge)
//     and refuses any change to its version, token, communicator or ranks.
//   - Message headers round-trip.
#include <vector>

#include "fuzz_support.h"
#include "transports/tcp/wire.h"

namespace tcp = tbcoll::tcp;

namespace {

// Feeds `bytes` to parse_hello as the acceptor does (asking for at most what it wants), in pieces of the sizes in
// `cuts`; returns the final verdict and how many bytes it consumed.
tcp::HelloParse feed(const std::string& bytes, const std::string& cuts, tcp::Hello* hello, std::string* token,
                     size_t* used) {
  std::vector<uint8_t> in;
  size_t cut = 0;
  for (;;) {
    size_t want = 0;
    const tcp::HelloParse parsed = tcp::parse_hello(in.data(), in.size(), hello, token, &want);
    *used = in.size();
    if (parsed != tcp::HelloParse::kIncomplete) return parsed;
    FUZZ_CHECK(want > in.size());
    if (in.size() == bytes.size()) return parsed;  // the peer closed
    size_t piece = cuts.empty() ? 512 : 1 + static_cast<uint8_t>(cuts[cut++ % cuts.size()]);
    piece = std::min({piece, want - in.size(), bytes.size() - in.size()});
    in.insert(in.end(), bytes.begin() + static_cast<std::ptrdiff_t>(in.size()),
              bytes.begin() + static_cast<std::ptrdiff_t>(in.size() + piece));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tbcoll_fuzz::Reader in(data, size);
  const std::string cuts = in.bytes(in.take<uint8_t>() % 16);
  const std::string bytes = in.rest();

  tcp::Hello whole_hello{}, cut_hello{};
  std::string whole_token, cut_token;
  size_t whole_used = 0, cut_used = 0;
  const tcp::HelloParse whole = feed(bytes, "", &whole_hello, &whole_token, &whole_used);
  const tcp::HelloParse cut = feed(bytes, cuts, &cut_hello, &cut_token, &cut_used);
  FUZZ_CHECK(whole == cut && whole_used == cut_used);
  if (whole == tcp::HelloParse::kComplete) {
    FUZZ_CHECK(whole_hello.magic == tcp::kHelloMagic && whole_hello.token_len <= tcp::kMaxTokenBytes);
    FUZZ_CHECK(whole_used == sizeof(tcp::Hello) + whole_hello.token_len);
    FUZZ_CHECK(whole_token == bytes.substr(sizeof(tcp::Hello), whole_hello.token_len) && whole_token == cut_token);
    FUZZ_CHECK(std::memcmp(&whole_hello, &cut_hello, sizeof(whole_hello)) == 0);
    // What the acceptor would say: accepted only when it is exactly what it expects.
    const tcp::WelcomeStatus status = tcp::judge_hello(whole_hello, whole_token, "job-token", 42, 1, true);
    const bool expected = whole_hello.version == tcp::kProtocolVersion && whole_token == "job-token" &&
                          whole_hello.comm_id == 42 && whole_hello.to_rank == 1;
    FUZZ_CHECK((status == tcp::WelcomeStatus::kAccepted) == expected);
    FUZZ_CHECK(tcp::judge_hello(whole_hello, whole_token, "job-token", 42, 1, false) != tcp::WelcomeStatus::kAccepted);
    FUZZ_CHECK(std::string(tcp::welcome_status_name(static_cast<uint32_t>(status))) != "unknown status");
  }

  // Encode, parse, judge: the connector's own Hello for the fields the input names is accepted by a peer that
  // expects them, and refused when any of them differs.
  tbcoll_fuzz::Reader fields(data, size);
  const int32_t from = fields.take<int32_t>(), to = fields.take<int32_t>();
  const uint64_t comm = fields.take<uint64_t>();
  const std::string token = fields.bytes(fields.take<uint16_t>() % (tcp::kMaxTokenBytes + 1));
  const tcp::Hello hello{tcp::kHelloMagic, tcp::kProtocolVersion, static_cast<uint16_t>(token.size()), from, to, comm};
  std::string encoded(sizeof(hello), '\0');
  std::memcpy(encoded.data(), &hello, sizeof(hello));
  encoded += token;
  tcp::Hello parsed{};
  std::string parsed_token;
  size_t used = 0;
  FUZZ_CHECK(feed(encoded, cuts, &parsed, &parsed_token, &used) == tcp::HelloParse::kComplete);
  FUZZ_CHECK(used == encoded.size() && parsed_token == token && std::memcmp(&parsed, &hello, sizeof(hello)) == 0);
  FUZZ_CHECK(tcp::judge_hello(parsed, parsed_token, token, comm, to, true) == tcp::WelcomeStatus::kAccepted);
  FUZZ_CHECK(tcp::judge_hello(parsed, parsed_token + "x", token, comm, to, true) == tcp::WelcomeStatus::kBadToken);
  FUZZ_CHECK(tcp::judge_hello(parsed, parsed_token, token, comm + 1, to, true) == tcp::WelcomeStatus::kBadComm);
  FUZZ_CHECK(tcp::judge_hello(parsed, parsed_token, token, comm, to ^ 1, true) == tcp::WelcomeStatus::kBadRank);
  tcp::Hello other_version = parsed;
  other_version.version ^= 1;
  FUZZ_CHECK(tcp::judge_hello(other_version, parsed_token, token, comm, to, true) == tcp::WelcomeStatus::kBadVersion);

  tcp::MessageHeader header{tcp::kMessageMagic, 0, fields.take<uint64_t>(), fields.take<uint64_t>(),
                            fields.take<uint64_t>()};
  uint8_t wire_bytes[sizeof(header)];
  std::memcpy(wire_bytes, &header, sizeof(header));
  tcp::MessageHeader back;
  std::memcpy(&back, wire_bytes, sizeof(back));
  FUZZ_CHECK(back.magic == tcp::kMessageMagic && back.tag == header.tag && back.meta == header.meta &&
             back.bytes == header.bytes);
  return 0;
}
