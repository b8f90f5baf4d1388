// Wire format of the TCP rendezvous store. Everything little-endian, fixed-size headers, bounded lengths:
//
//   client hello   : magic u32 | version u16 | flags u16 | token_len u32 | token bytes [| nonce_c 32 B]
//   server welcome : magic u32 | status u32                      (status 0 = accepted; else closed)
// With a job secret (flags bit 0; both sides must have one, common/auth.h), before the token is even looked at:
//   server         : welcome (status 0) | nonce_s 32 B | HMAC(secret, "tbcoll store responder" 0 nonce_c nonce_s token)
//   client         : HMAC(secret, "tbcoll store initiator" 0 nonce_s nonce_c token)
//   server         : welcome (status 0 = accepted: secret and token; else closed)
//   request        : op u32 | key_len u32 | value_len u32 | reserved u32 | key | value
//   response       : status u32 | value_len u32 | value          (get waits until the key is set)
// Ops: set (key, value), get (key), add (key, 8-byte delta; answers the sum), erase (key; absent is fine).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace tbcoll::store_protocol {

constexpr uint32_t kMagic = 0x54425354;  // "TBST"
constexpr uint16_t kVersion = 3;  // 2: erase; 3: flags, the secret's challenge-response
constexpr uint16_t kFlagSecret = 1;  ///< hello flags: the client has a job secret (a nonce follows the token)
constexpr const char* kResponderLabel = "tbcoll store responder";
constexpr const char* kInitiatorLabel = "tbcoll store initiator";
constexpr uint32_t kMaxTokenBytes = 1024;
constexpr uint32_t kMaxKeyBytes = 4096;
constexpr uint32_t kMaxValueBytes = 16u << 20;
constexpr uint64_t kMaxStoredBytes = uint64_t{256} << 20;  ///< keys and values held by the server, in total

enum class Op : uint32_t { kSet = 1, kGet = 2, kAdd = 3, kErase = 4 };

inline const char* op_name(Op op) {
  switch (op) {
    case Op::kSet: return "set";
    case Op::kGet: return "get";
    case Op::kAdd: return "add";
    case Op::kErase: return "erase";
  }
  return "unknown op";
}
enum class Status : uint32_t {
  kOk = 0,
  kBadToken = 1,
  kBadVersion = 2,
  kBadRequest = 3,
  kOverflow = 4,
  kFull = 5,
  kNeedSecret = 6,  ///< the store has a secret, the client none
  kBadSecret = 7,   ///< the client's proof is wrong
  kNoSecret = 8     ///< the client has a secret, the store none
};

/// What a non-zero status means, for the client's error message.
inline std::string status_text(uint32_t status) {
  switch (static_cast<Status>(status)) {
    case Status::kOk: return "ok";
    case Status::kBadToken: return "wrong job token";
    case Status::kBadVersion: return "protocol version mismatch";
    case Status::kBadRequest: return "malformed request";
    case Status::kOverflow: return "the counter would overflow 64 bits";
    case Status::kFull: return "the store is full";
    case Status::kNeedSecret: return "the store requires the job secret and we have none (TBCOLL_SECRET set on some ranks only?)";
    case Status::kBadSecret: return "the store rejected our proof of the job secret (TBCOLL_SECRET differs between ranks?)";
    case Status::kNoSecret: return "we have a job secret and the store has none (TBCOLL_SECRET set on some ranks only?)";
  }
  return "unknown status " + std::to_string(status);
}

struct Hello {
  uint32_t magic;
  uint16_t version;
  uint16_t flags;
  uint32_t token_len;
};
static_assert(sizeof(Hello) == 12, "packed hello");

struct Welcome {
  uint32_t magic;
  uint32_t status;
};

struct RequestHeader {
  uint32_t op;
  uint32_t key_len;
  uint32_t value_len;
  uint32_t reserved;
};

struct ResponseHeader {
  uint32_t status;
  uint32_t value_len;
};

/// The server's verdict on a client's hello, before its token is read: kOk, kBadRequest (not a store client, or
/// a token longer than kMaxTokenBytes) or kBadVersion.
inline Status check_hello(const Hello& hello) {
  if (hello.magic != kMagic || hello.token_len > kMaxTokenBytes) return Status::kBadRequest;
  if (hello.version != kVersion) return Status::kBadVersion;
  return Status::kOk;
}

/// Validates a request header; returns an empty string when fine, else why not.
inline std::string check_request(const RequestHeader& header) {
  if (header.op < 1 || header.op > 4) return "unknown op " + std::to_string(header.op);
  if (header.key_len == 0 || header.key_len > kMaxKeyBytes) return "key length " + std::to_string(header.key_len);
  if (header.value_len > kMaxValueBytes) return "value length " + std::to_string(header.value_len);
  if (header.op == static_cast<uint32_t>(Op::kAdd) && header.value_len != 8) return "add value must be 8 bytes";
  if (header.op == static_cast<uint32_t>(Op::kGet) && header.value_len != 0) return "get carries no value";
  if (header.op == static_cast<uint32_t>(Op::kErase) && header.value_len != 0) return "erase carries no value";
  if (header.reserved != 0) return "reserved field set";
  return {};
}

}  // namespace tbcoll::store_protocol
