// In-process store for ranks that are threads of one process.
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "tbcoll/error.hpp"
#include "bootstrap/store_auth.h"
#include "tbcoll/store.hpp"

namespace tbcoll {
namespace {

class InMemoryStore final : public Store {
 public:
  using Store::get;  // the cancellable get: Store's slices of the one below

  void set(const std::string& key, const std::vector<uint8_t>& value, Deadline) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      values_[key] = value;
    }
    changed_.notify_all();
  }

  std::vector<uint8_t> get(const std::string& key, Deadline deadline) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_until(lock, deadline, [&] { return values_.count(key) != 0; })) {
      throw TimeoutError(fmt::format("[store] key {:?} was not set before the deadline", key));
    }
    return values_[key];
  }

  void erase(const std::string& key, Deadline) override {
    std::lock_guard<std::mutex> lock(mutex_);
    values_.erase(key);
  }

  int64_t add(const std::string& key, int64_t delta, Deadline) override {
    int64_t result = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto found = values_.find(key);
      if (found == values_.end() && delta == 0) return 0;  // a read: nothing stored (the TCP store does the same)
      if (found != values_.end() && found->second.size() == sizeof(int64_t)) {
        std::memcpy(&result, found->second.data(), sizeof(result));
      }
      if (__builtin_add_overflow(result, delta, &result)) {
        throw InvalidArgument(fmt::format("[store] add of {} to key {:?} would overflow 64 bits", delta, key));
      }
      std::vector<uint8_t>& value = values_[key];
      value.resize(sizeof(result));
      std::memcpy(value.data(), &result, sizeof(result));
    }
    changed_.notify_all();
    return result;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<uint8_t>> values_;
};

}  // namespace

std::shared_ptr<Store> make_in_memory_store() { return std::make_shared<InMemoryStore>(); }

namespace bootstrap {
bool is_in_memory(const Store& store) { return dynamic_cast<const InMemoryStore*>(&store) != nullptr; }
}  // namespace bootstrap

}  // namespace tbcoll
