// TCP transport wire formats. Little-endian, fixed size, validated on arrival.
//
//   handshake (connector -> acceptor): Hello   | token bytes
//   handshake reply                  : Welcome
//   every message                    : MessageHeader | payload (header.bytes)
#pragma once

#include <cstdint>

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
