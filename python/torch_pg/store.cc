#include "store.h"

#include <fmt/format.h>

#include "tbcoll/error.hpp"

namespace tbcoll::torch_pg {
namespace {

class C10dStore final : public Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<uint8_t>& value, Deadline deadline) override {
    call("set", key, deadline, [&] { store_->set(key, value); });
  }

  std::vector<uint8_t> get(const std::string& key, Deadline deadline) override {
    std::vector<uint8_t> out;
    call("get", key, deadline, [&] {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left <= std::chrono::milliseconds(0)) {
        throw TimeoutError(fmt::format("store: key {} not set before the deadline", key));
      }
      store_->wait({key}, left);
      out = store_->get(key);
    });
    return out;
  }
  using Store::get;

  int64_t add(const std::string& key, int64_t delta, Deadline deadline) override {
    int64_t out = 0;
    call("add", key, deadline, [&] { out = store_->add(key, delta); });
    return out;
  }

  void erase(const std::string& key, Deadline deadline) override {
    try {
      call("deleteKey", key, deadline, [&] { store_->deleteKey(key); });
    } catch (const Error&) {
      // Stores that cannot delete (FileStore under some prefixes) keep the record: harmless.
    }
  }

 private:
  template <typename F>
  void call(const char* what, const std::string& key, Deadline deadline, F&& body) {
    try {
      body();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& error) {
      if (Clock::now() >= deadline - std::chrono::milliseconds(1)) {
        throw TimeoutError(fmt::format("store.{}({}): {}", what, key, error.what()));
      }
      throw IoError(fmt::format("store.{}({}) failed: {}", what, key, error.what()));
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace

std::shared_ptr<Store> wrap_store(c10::intrusive_ptr<c10d::Store> store) {
  return std::make_shared<C10dStore>(std::move(store));
}

}  // namespace tbcoll::torch_pg
