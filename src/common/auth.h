// Authentication of a job's connections with a shared secret (TBCOLL_SECRET, or the file TBCOLL_SECRET_FILE names):
// an HMAC-SHA256 challenge-response both ways, before anything else a connection sends is trusted.
//
//   initiator -> responder : ... | nonce_i (32 B)
//   responder -> initiator : ... | nonce_r (32 B) | HMAC(secret, "<protocol> responder" 0 nonce_i nonce_r context)
//   initiator -> responder : HMAC(secret, "<protocol> initiator" 0 nonce_r nonce_i context)
//   responder -> initiator : accepted or not
// Each side proves the secret over the other's fresh nonce, under its own label (a proof cannot be reflected
// back), bound to the connection's context (job token, ranks). Nonces come from the platform's random source; proofs
// are compared in constant time. HMAC-SHA256 is OpenSSL 3's libcrypto, loaded with dlopen when first needed: the
// library builds and runs without it, and only a job that sets a secret needs it (a clear error otherwise).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/env.h"
#include "tbcoll/deadline.hpp"

namespace tbcoll::auth {

constexpr size_t kNonceBytes = 32;
constexpr size_t kProofBytes = 32;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Proof = std::array<uint8_t, kProofBytes>;

/// The job's secret from TBCOLL_SECRET or TBCOLL_SECRET_FILE (its contents, one trailing newline dropped, read with
/// the bounds of common/secret_file.h); "" when neither is set. Throws InvalidArgument when both are set, the file
/// is refused (unreadable, empty, a device, open to group or others, too long, a silent pipe), or libcrypto cannot
/// be loaded (naming what to install).
std::string job_secret(const env::Settings& settings);
/// job_secret of the process environment.
std::string job_secret_from_env();

/// Whether libcrypto could be loaded (and why not, in *why).
bool available(std::string* why = nullptr);
/// HMAC-SHA256 of data under key. Throws InvalidArgument when libcrypto is missing.
Proof hmac_sha256(const std::string& key, const void* data, size_t bytes);
/// A fresh nonce from the platform's random source; throws IoError if it cannot be read.
Nonce nonce();
/// HMAC(secret, label 0 first second context): a side's proof over the other side's nonce (first) and its own.
Proof proof(const std::string& secret, const char* label, const Nonce& first, const Nonce& second,
            const std::string& context);
/// The integrity mode's MAC of one direction of a connection (TBCOLL_INTEGRITY): GMAC, i.e. AES-256-GCM over the
/// message as additional data and nothing encrypted, under a key of that direction alone, with the message's
/// number in the direction as the nonce (never reused under one key: keys are drawn per connection). A replayed,
/// reordered, dropped or altered message fails its check. Messages may be fed in pieces: begin, update..., finish.
/// One thread at a time.
class MessageMac {
 public:
  static constexpr size_t kTagBytes = 16;
  using Tag = std::array<uint8_t, kTagBytes>;
  /// Throws InvalidArgument when libcrypto (or its AES-GCM) cannot be loaded.
  explicit MessageMac(const Proof& key);
  ~MessageMac();
  MessageMac(const MessageMac&) = delete;
  MessageMac& operator=(const MessageMac&) = delete;
  /// Starts the MAC of message number `counter`.
  void begin(uint64_t counter);
  void update(const void* data, size_t bytes);
  /// The tag of everything since begin().
  Tag finish();

 private:
  void* context_ = nullptr;  // EVP_CIPHER_CTX
};

/// Constant-time comparison.
bool same(const Proof& a, const Proof& b);

/// The whole exchange on a connected socket, first thing on it, for protocols with no handshake of their own to
/// carry it (the ibverbs side channel), blocking until the deadline (*cancelled as in net::read_exact):
///   initiator: magic "TBAU" u32 | 0 u32 | nonce_i;  responder: magic | 0 | nonce_r | proof_r;
///   initiator: proof_i;                               responder: magic | verdict (0 accepted)
/// initiate() throws RemoteError when the peer cannot prove the secret or rejects ours; respond() returns false
/// (with why) for a peer that failed, or sent anything else (a peer without a secret sends its own handshake).
void initiate(int fd, const std::string& secret, const std::string& protocol, const std::string& context,
              Clock::time_point deadline, const std::string& who, const std::atomic<bool>* cancelled);
bool respond(int fd, const std::string& secret, const std::string& protocol, const std::string& context,
             Clock::time_point deadline, const std::string& who, const std::atomic<bool>* cancelled, std::string* why);

}  // namespace tbcoll::auth
