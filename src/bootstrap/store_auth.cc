// Records sealed with the job secret (see store_auth.h).
#include "bootstrap/store_auth.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "common/auth.h"
#include "common/constant_time.h"
#include "tbcoll/error.hpp"

namespace tbcoll::bootstrap {
namespace {

class AuthenticatedStore final : public Store {
 public:
  AuthenticatedStore(std::shared_ptr<Store> inner, std::string secret, std::string token)
      : inner_(std::move(inner)), secret_(std::move(secret)), token_(std::move(token)) {}

  void set(const std::string& key, const std::vector<uint8_t>& value, Deadline deadline) override {
    std::vector<uint8_t> sealed = value;
    const auth::Proof mac = mac_of(key, value.data(), value.size());
    sealed.insert(sealed.end(), mac.begin(), mac.end());
    inner_->set(key, sealed, deadline);
  }
  std::vector<uint8_t> get(const std::string& key, Deadline deadline) override {
    return opened(key, inner_->get(key, deadline));
  }
  std::vector<uint8_t> get(const std::string& key, Deadline deadline, const std::atomic<bool>* cancelled) override {
    return opened(key, inner_->get(key, deadline, cancelled));
  }
  int64_t add(const std::string& key, int64_t delta, Deadline deadline) override {
    return inner_->add(key, delta, deadline);
  }
  void erase(const std::string& key, Deadline deadline) override { inner_->erase(key, deadline); }
  std::string local_address() const override { return inner_->local_address(); }

 private:
  // HMAC-SHA256(secret, label, token, key, value), each part length-prefixed so no two records share a message.
  auth::Proof mac_of(const std::string& key, const uint8_t* value, size_t bytes) const {
    std::vector<uint8_t> message;
    auto part = [&](const void* data, size_t n) {
      const uint64_t length = n;
      const auto* l = reinterpret_cast<const uint8_t*>(&length);
      message.insert(message.end(), l, l + sizeof(length));
      message.insert(message.end(), static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + n);
    };
    static constexpr char kLabel[] = "tbcoll rendezvous record v1";
    part(kLabel, sizeof(kLabel) - 1);
    part(token_.data(), token_.size());
    part(key.data(), key.size());
    part(value, bytes);
    return auth::hmac_sha256(secret_, message.data(), message.size());
  }

  std::vector<uint8_t> opened(const std::string& key, std::vector<uint8_t> sealed) const {
    if (sealed.size() < auth::kProofBytes) throw forged(key, sealed.size(), "shorter than its MAC");
    const size_t bytes = sealed.size() - auth::kProofBytes;
    const auth::Proof expected = mac_of(key, sealed.data(), bytes);
    if (!constant_time_equal(sealed.data() + bytes, expected.data(), expected.size())) {
      throw forged(key, sealed.size(), "its MAC does not match");
    }
    sealed.resize(bytes);
    return sealed;
  }

  static IoError forged(const std::string& key, size_t bytes, const char* why) {
    return IoError(fmt::format(
        "[auth] rendezvous record '{}' ({} B) was not written by a rank of this job ({}): someone without the job "
        "secret wrote or rewrote it in the store (a store others can reach, or another job's record)", key, bytes, why));
  }

  std::shared_ptr<Store> inner_;
  std::string secret_;
  std::string token_;
};

}  // namespace

std::shared_ptr<Store> authenticated(std::shared_ptr<Store> store, const std::string& secret,
                                     const std::string& token) {
  if (secret.empty() || store == nullptr || dynamic_cast<const AuthenticatedStore*>(store.get()) != nullptr) {
    return store;
  }
  return std::make_shared<AuthenticatedStore>(std::move(store), secret, token);
}

}  // namespace tbcoll::bootstrap
