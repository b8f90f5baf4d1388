// TCP transport wire formats. Little-endian, fixed size, validated on arrival.
//
//   handshake (connector -> acceptor): Hello   | token bytes [| nonce_c 32 B]
//   handshake reply                  : Welcome
// With a job secret (Hello::flags kFlagSecret; both sides must have one, common/auth.h), before the token, ranks or
// communicator are looked at:
//   acceptor  : Welcome (accepted so far) | nonce_a 32 B | HMAC(secret, kResponderLabel 0 nonce_c nonce_a context)
//   connector : HMAC(secret, kInitiatorLabel 0 nonce_a nonce_c context)
//   acceptor  : Welcome (the verdict)
// context: "token|comm_id|from_rank|to_rank|flags" (proof_context()).
//   every message                    : MessageHeader | payload (header.bytes) [| tag 16 B]
// The integrity mode (Hello::flags kFlagIntegrity, TBCOLL_INTEGRITY=1; needs the secret, both sides must agree): each
// message ends with a 16-byte tag, the GMAC (auth::MessageMac) of header and payload under the key of its direction,
// with the message's number in that direction as the nonce. The keys are drawn in the handshake, one per direction:
//   HMAC(secret, kConnectorKeyLabel / kAcceptorKeyLabel 0 nonce_c nonce_a context)
// so they are fresh per connection (both nonces), bound to it (context), and known only to who knows the secret.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "common/constant_time.h"

namespace tbcoll::tcp {

constexpr uint32_t kHelloMagic = 0x54424843;    // "TBHC"
constexpr uint32_t kMessageMagic = 0x54424d47;  // "TBMG"
constexpr uint16_t kProtocolVersion = 3;  // 2: flags, the secret's challenge-response; 3: the integrity mode
constexpr uint32_t kMaxTokenBytes = 1024;
constexpr uint32_t kFlagSecret = 1;  ///< the connector has a job secret: a nonce follows the token
constexpr uint32_t kFlagIntegrity = 2;  ///< the connector runs the integrity mode: every message carries a tag
constexpr size_t kTagBytes = 16;       ///< the integrity mode's per-message tag (auth::MessageMac::kTagBytes)
constexpr const char* kResponderLabel = "tbcoll tcp responder";
constexpr const char* kInitiatorLabel = "tbcoll tcp initiator";
constexpr const char* kConnectorKeyLabel = "tbcoll tcp integrity connector to acceptor";
constexpr const char* kAcceptorKeyLabel = "tbcoll tcp integrity acceptor to connector";

struct Hello {
  uint32_t magic;
  uint16_t version;
  uint16_t token_len;
  int32_t from_rank;
  int32_t to_rank;
  uint64_t comm_id;
  uint32_t flags;
  uint32_t reserved;
};
static_assert(sizeof(Hello) == 32, "hello layout");

enum class WelcomeStatus : uint32_t {
  kAccepted = 0,
  kBadToken = 1,
  kBadVersion = 2,
  kBadRank = 3,
  kBadComm = 4,
  kNeedSecret = 5,  ///< the acceptor has a job secret, the connector none
  kBadSecret = 6,   ///< the connector's proof is wrong
  kNoSecret = 7,    ///< the connector has a job secret, the acceptor none
  kIntegrityDiffers = 8  ///< one side runs the integrity mode, the other not
};

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
  if (!constant_time_equal(token, our_token)) return WelcomeStatus::kBadToken;
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
    case WelcomeStatus::kNeedSecret: return "the peer requires the job secret and we have none (TBCOLL_SECRET set on some ranks only?)";
    case WelcomeStatus::kBadSecret: return "wrong job secret (TBCOLL_SECRET differs between ranks?)";
    case WelcomeStatus::kNoSecret: return "we have a job secret and the peer none (TBCOLL_SECRET set on some ranks only?)";
    case WelcomeStatus::kIntegrityDiffers: return "the integrity mode is on at one end only (TBCOLL_INTEGRITY differs between ranks?)";
  }
  return "unknown status";
}

/// What both sides' proofs (and the integrity keys) are bound to: the connection's token, communicator, ranks and
/// flags (so a relay that strips the integrity flag fails the proofs).
inline std::string proof_context(const std::string& token, const Hello& hello) {
  return token + "|" + std::to_string(hello.comm_id) + "|" + std::to_string(hello.from_rank) + "|" +
         std::to_string(hello.to_rank) + "|" + std::to_string(hello.flags);
}

}  // namespace tbcoll::tcp
