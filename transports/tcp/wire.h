// TCP transport wire formats. Little-endian, fixed size, validated on arrival.
//
//   handshake (connector -> acceptor): Hello   | token bytes
//   handshake reply                  : Welcome
//   every message                    : MessageHeader | payload (header.bytes)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace tbcoll::tcp {

constexpr uint32_t kHelloMagic = 0x54424843;    // "TBHC"
constexpr uint32_t kMessageMagic = 0x54424d47;  // "TBMG"
constexpr uint16_t kProtocolVersion = 1;
constexpr uint32_t kMaxTokenBytes = 1024;

struct Hello {
  uint32_t magic;
  uint16_t version;
  uint16_t token_len;
  int32_t from_rank;
  int32_t to_rank;
  uint64_t comm_id;
};
static_assert(sizeof(Hello) == 24, "hello layout");

enum class WelcomeStatus : uint32_t { kAccepted = 0, kBadToken = 1, kBadVersion = 2, kBadRank = 3, kBadComm = 4 };

struct Welcome {
  uint32_t magic;
  uint32_t status;
};

struct MessageHeader {
  uint32_t magic;
  uint32_t reserved;
  uint64_t tag;
  uint64_t meta;
  uint64_t bytes;
};
static_assert(sizeof(MessageHeader) == 32, "header layout");

/// Where an acceptor stands with the handshake bytes `in` received so far (the Hello, then its token).
enum class HelloParse { kIncomplete, kNotTbcoll, kTokenTooLong, kComplete };

/// Parses the first `size` bytes of a handshake (pure: fuzz/tcp_handshake.cc runs it on any bytes). Sets *wanted
/// to the handshake's whole length as far as known (sizeof(Hello) until the Hello is in, then with its token);
/// kComplete once size == *wanted, with *hello and *token filled. Bytes beyond *wanted are never looked at.
inline HelloParse parse_hello(const uint8_t* in, size_t size, Hello* hello, std::string* token, size_t* wanted) {
  *wanted = sizeof(Hello);
  if (size < sizeof(Hello)) return HelloParse::kIncomplete;
  std::memcpy(hello, in, sizeof(Hello));
  if (hello->magic != kHelloMagic) return HelloParse::kNotTbcoll;
  if (hello->token_len > kMaxTokenBytes) return HelloParse::kTokenTooLong;
  *wanted += hello->token_len;
  if (size < *wanted) return HelloParse::kIncomplete;
  token->assign(reinterpret_cast<const char*>(in) + sizeof(Hello), hello->token_len);
  return HelloParse::kComplete;
}

/// The acceptor's verdict on a complete handshake: ours is (protocol version, token, communicator, rank) and
/// rank_wanted says whether the claimed from_rank is one this side still waits for.
inline WelcomeStatus judge_hello(const Hello& hello, const std::string& token, const std::string& our_token,
                                 uint64_t our_comm_id, int our_rank, bool rank_wanted) {
  if (hello.version != kProtocolVersion) return WelcomeStatus::kBadVersion;
  if (token != our_token) return WelcomeStatus::kBadToken;
  if (hello.comm_id != our_comm_id) return WelcomeStatus::kBadComm;
  if (hello.to_rank != our_rank || !rank_wanted) return WelcomeStatus::kBadRank;
  return WelcomeStatus::kAccepted;
}

inline const char* welcome_status_name(uint32_t status) {
  switch (static_cast<WelcomeStatus>(status)) {
    case WelcomeStatus::kAccepted: return "accepted";
    case WelcomeStatus::kBadToken: return "wrong job token";
    case WelcomeStatus::kBadVersion: return "protocol version mismatch";
    case WelcomeStatus::kBadRank: return "unexpected rank";
    case WelcomeStatus::kBadComm: return "different communicator";
  }
  return "unknown status";
}

}  // namespace tbcoll::tcp
