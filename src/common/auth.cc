// HMAC-SHA256 through a dlopen'ed libcrypto, secrets and nonces (see auth.h).
#include "common/auth.h"

#include <dlfcn.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "common/constant_time.h"
#include "common/log.h"
#include "common/net.h"
#include "common/secret_file.h"
#include "platform/platform.h"
#include "tbcoll/error.hpp"

namespace tbcoll::auth {
namespace {

// The libcrypto calls we make (OpenSSL 3, none deprecated): HMAC() and EVP_sha256() for the proofs; for the
// integrity mode's per-message MAC, AES-256-GCM with the message as additional data only (GMAC) through the EVP
// cipher interface.
struct Crypto {
  using Sha256 = const void* (*)();
  using Hmac = unsigned char* (*)(const void* md, const void* key, int key_len, const unsigned char* data,
                                  size_t data_len, unsigned char* out, unsigned int* out_len);
  using CtxNew = void* (*)();
  using CtxFree = void (*)(void*);
  using Cipher = const void* (*)();
  using Init = int (*)(void* ctx, const void* cipher, void* engine, const unsigned char* key, const unsigned char* iv);
  using Update = int (*)(void* ctx, unsigned char* out, int* out_len, const unsigned char* in, int in_len);
  using Final = int (*)(void* ctx, unsigned char* out, int* out_len);
  using Ctrl = int (*)(void* ctx, int type, int arg, void* ptr);
  Sha256 sha256 = nullptr;
  Hmac hmac = nullptr;
  CtxNew ctx_new = nullptr;
  CtxFree ctx_free = nullptr;
  Cipher aes_256_gcm = nullptr;
  Init encrypt_init = nullptr;
  Update encrypt_update = nullptr;
  Final encrypt_final = nullptr;
  Ctrl ctrl = nullptr;
  std::string error;  // why not loaded
  bool has_gcm() const {
    return ctx_new && ctx_free && aes_256_gcm && encrypt_init && encrypt_update && encrypt_final && ctrl;
  }
};

template <typename Fn>
void load(void* handle, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(handle, name));
}

const Crypto& crypto() {
  static const Crypto loaded = [] {
    Crypto c;
    std::string tried;
    for (const std::string& name : platform::crypto_libraries()) {
      void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        const char* error = dlerror();
        tried += fmt::format("{}{}: {}", tried.empty() ? "" : "; ", name, error != nullptr ? error : "not found");
        continue;
      }
      c.sha256 = reinterpret_cast<Crypto::Sha256>(dlsym(handle, "EVP_sha256"));
      c.hmac = reinterpret_cast<Crypto::Hmac>(dlsym(handle, "HMAC"));
      load(handle, "EVP_CIPHER_CTX_new", &c.ctx_new);
      load(handle, "EVP_CIPHER_CTX_free", &c.ctx_free);
      load(handle, "EVP_aes_256_gcm", &c.aes_256_gcm);
      load(handle, "EVP_EncryptInit_ex", &c.encrypt_init);
      load(handle, "EVP_EncryptUpdate", &c.encrypt_update);
      load(handle, "EVP_EncryptFinal_ex", &c.encrypt_final);
      load(handle, "EVP_CIPHER_CTX_ctrl", &c.ctrl);
      if (c.sha256 != nullptr && c.hmac != nullptr) return c;
      tried += fmt::format("{}{}: no HMAC/EVP_sha256", tried.empty() ? "" : "; ", name);
      c.sha256 = nullptr;
      c.hmac = nullptr;
    }
    c.error = fmt::format("OpenSSL's libcrypto (3.x) cannot be loaded ({}): install it (Debian: libssl3; macOS: "
                          "brew install openssl@3)", tried);
    return c;
  }();
  return loaded;
}

std::string read_secret_file(const std::string& path) {
  secret_file::Read read = secret_file::read(path);
  if (!read.error.empty()) throw InvalidArgument(fmt::format("[auth] TBCOLL_SECRET_FILE={} {}", path, read.error));
  return read.secret;
}

}  // namespace

bool available(std::string* why) {
  const Crypto& c = crypto();
  if (why != nullptr) *why = c.error;
  return c.hmac != nullptr;
}

std::string job_secret(const env::Settings& settings) {
  const std::string inline_secret = settings.get("TBCOLL_SECRET");
  const std::string file = settings.get("TBCOLL_SECRET_FILE");
  if (!inline_secret.empty() && !file.empty()) {
    throw InvalidArgument("[auth] both TBCOLL_SECRET and TBCOLL_SECRET_FILE are set: set one");
  }
  const std::string secret = file.empty() ? inline_secret : read_secret_file(file);
  if (secret.empty()) return secret;
  std::string why;
  if (!available(&why)) throw InvalidArgument(fmt::format("[auth] a secret is set (TBCOLL_SECRET{}) but {}",
                                                          file.empty() ? "" : "_FILE", why));
  if (secret.size() < 16) log::warn("[auth] the job secret has only {} bytes: use 16 or more random ones", secret.size());
  return secret;
}

std::string job_secret_from_env() { return job_secret(env::Settings()); }

Proof hmac_sha256(const std::string& key, const void* data, size_t bytes) {
  const Crypto& c = crypto();
  if (c.hmac == nullptr) throw InvalidArgument("[auth] " + c.error);
  Proof out{};
  unsigned int length = 0;
  if (c.hmac(c.sha256(), key.data(), static_cast<int>(key.size()), static_cast<const unsigned char*>(data), bytes,
             out.data(), &length) == nullptr ||
      length != out.size()) {
    throw IoError("[auth] HMAC-SHA256 failed in libcrypto");
  }
  return out;
}

Nonce nonce() {
  Nonce out{};
  if (!platform::random_bytes(out.data(), out.size())) {
    throw IoError(fmt::format("[auth] cannot read the system's random source: {}", std::strerror(errno)));
  }
  return out;
}

Proof proof(const std::string& secret, const char* label, const Nonce& first, const Nonce& second,
            const std::string& context) {
  std::vector<uint8_t> message(label, label + std::strlen(label) + 1);  // the label with its terminating 0
  message.insert(message.end(), first.begin(), first.end());
  message.insert(message.end(), second.begin(), second.end());
  message.insert(message.end(), context.begin(), context.end());
  return hmac_sha256(secret, message.data(), message.size());
}

MessageMac::MessageMac(const Proof& key) {
  const Crypto& c = crypto();
  if (c.hmac == nullptr) throw InvalidArgument("[auth] the integrity mode (TBCOLL_INTEGRITY) needs " + c.error);
  if (!c.has_gcm()) {
    throw InvalidArgument("[auth] the integrity mode (TBCOLL_INTEGRITY) needs AES-256-GCM, which this libcrypto lacks");
  }
  context_ = c.ctx_new();
  if (context_ == nullptr || c.encrypt_init(context_, c.aes_256_gcm(), nullptr, key.data(), nullptr) != 1) {
    if (context_ != nullptr) c.ctx_free(context_);
    throw IoError("[auth] cannot set up AES-256-GCM in libcrypto");
  }
}

MessageMac::~MessageMac() { crypto().ctx_free(context_); }

void MessageMac::begin(uint64_t counter) {
  uint8_t iv[12] = {};
  for (int i = 0; i < 8; ++i) iv[4 + i] = static_cast<uint8_t>(counter >> (8 * i));
  if (crypto().encrypt_init(context_, nullptr, nullptr, nullptr, iv) != 1) throw IoError("[auth] AES-GCM init failed");
}

void MessageMac::update(const void* data, size_t bytes) {
  const Crypto& c = crypto();
  const auto* at = static_cast<const unsigned char*>(data);
  while (bytes > 0) {
    const int piece = static_cast<int>(std::min<size_t>(bytes, size_t{1} << 30));
    int ignored = 0;
    if (c.encrypt_update(context_, nullptr, &ignored, at, piece) != 1) throw IoError("[auth] AES-GCM update failed");
    at += piece;
    bytes -= static_cast<size_t>(piece);
  }
}

MessageMac::Tag MessageMac::finish() {
  const Crypto& c = crypto();
  Tag tag{};
  unsigned char none[16];
  int ignored = 0;
  constexpr int kGetTag = 0x10;  // EVP_CTRL_GCM_GET_TAG (EVP_CTRL_AEAD_GET_TAG)
  if (c.encrypt_final(context_, none, &ignored) != 1 ||
      c.ctrl(context_, kGetTag, static_cast<int>(tag.size()), tag.data()) != 1) {
    throw IoError("[auth] AES-GCM tag failed");
  }
  return tag;
}

bool same(const Proof& a, const Proof& b) { return constant_time_equal(a.data(), b.data(), a.size()); }

namespace {

constexpr uint32_t kMagic = 0x55414254;  // "TBAU"

struct Opening {
  uint32_t magic = kMagic;
  uint32_t reserved = 0;
  Nonce nonce{};
};
static_assert(sizeof(Opening) == 8 + kNonceBytes, "opening layout");

struct Verdict {
  uint32_t magic = kMagic;
  uint32_t status = 0;
};

}  // namespace

void initiate(int fd, const std::string& secret, const std::string& protocol, const std::string& context,
              Clock::time_point deadline, const std::string& who, const std::atomic<bool>* cancelled) {
  Opening mine;
  mine.nonce = nonce();
  net::write_all(fd, &mine, sizeof(mine), deadline, who, cancelled);
  Opening theirs;
  Proof their_proof{};
  net::read_exact(fd, &theirs, sizeof(theirs), deadline, who, cancelled);
  net::read_exact(fd, their_proof.data(), their_proof.size(), deadline, who, cancelled);
  if (theirs.magic != kMagic ||
      !same(their_proof, proof(secret, (protocol + " responder").c_str(), mine.nonce, theirs.nonce, context))) {
    throw RemoteError(who + ": the peer could not prove it knows the job secret (TBCOLL_SECRET)");
  }
  const Proof ours = proof(secret, (protocol + " initiator").c_str(), theirs.nonce, mine.nonce, context);
  net::write_all(fd, ours.data(), ours.size(), deadline, who, cancelled);
  Verdict verdict;
  net::read_exact(fd, &verdict, sizeof(verdict), deadline, who, cancelled);
  if (verdict.magic != kMagic || verdict.status != 0) {
    throw RemoteError(who + ": the peer rejected our proof of the job secret (TBCOLL_SECRET differs?)");
  }
}

bool respond(int fd, const std::string& secret, const std::string& protocol, const std::string& context,
             Clock::time_point deadline, const std::string& who, const std::atomic<bool>* cancelled, std::string* why) {
  Opening theirs;
  net::read_exact(fd, &theirs, sizeof(theirs), deadline, who, cancelled);
  if (theirs.magic != kMagic || theirs.reserved != 0) {
    *why = "no proof of the job secret (a peer without TBCOLL_SECRET, or not a tbcoll peer)";
    return false;
  }
  Opening mine;
  mine.nonce = nonce();
  const Proof ours = proof(secret, (protocol + " responder").c_str(), theirs.nonce, mine.nonce, context);
  net::write_all(fd, &mine, sizeof(mine), deadline, who, cancelled);
  net::write_all(fd, ours.data(), ours.size(), deadline, who, cancelled);
  Proof their_proof{};
  net::read_exact(fd, their_proof.data(), their_proof.size(), deadline, who, cancelled);
  Verdict verdict;
  const bool good = same(their_proof, proof(secret, (protocol + " initiator").c_str(), mine.nonce, theirs.nonce, context));
  verdict.status = good ? 0 : 1;
  try {
    net::write_all(fd, &verdict, sizeof(verdict), deadline, who, cancelled);
  } catch (const Error&) {
    if (good) throw;
  }
  if (!good) *why = "wrong proof of the job secret (TBCOLL_SECRET differs?)";
  return good;
}

}  // namespace tbcoll::auth
