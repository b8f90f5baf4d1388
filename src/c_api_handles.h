// Handles the C API gave out and has not taken back (memory registrations, requests). Every use looks its handle
// up first, so a handle freed twice, one of another kind, one of another communicator or a garbage pointer is an
// error naming it, never a dereference.
#pragma once

#include <mutex>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "tbcoll/error.hpp"
#include "tbcoll/tbcoll.h"

namespace tbcoll::c_api {

class LiveHandles {
 public:
  /// `what` names the kind in errors ("registration handle", "request").
  explicit LiveHandles(const char* what) : what_(what) {}

  void add(const void* handle, tbcollComm_t comm) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_[handle] = comm;
  }
  /// The communicator the handle was made on; InvalidArgument for NULL, InvalidUsage when it is not live.
  tbcollComm_t check(const void* handle) const {
    if (handle == nullptr) throw InvalidArgument(fmt::format("{} is NULL", what_));
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(handle);
    if (it == live_.end()) throw not_live(handle);
    return it->second;
  }
  /// Takes the handle back (the caller deletes it): InvalidUsage when it is not live, InvalidArgument when comm
  /// is given and is not the communicator it was made on (it stays live then).
  void take(const void* handle, tbcollComm_t comm = nullptr) {
    if (handle == nullptr) throw InvalidArgument(fmt::format("{} is NULL", what_));
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(handle);
    if (it == live_.end()) throw not_live(handle);
    if (comm != nullptr && it->second != comm) {
      throw InvalidArgument(fmt::format("{} {} belongs to another communicator than the one given", what_, handle));
    }
    live_.erase(it);
  }

  /// Takes back every handle made on comm (the caller deletes them).
  std::vector<const void*> take_all(tbcollComm_t comm) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<const void*> out;
    for (auto it = live_.begin(); it != live_.end();) {
      if (it->second == comm) {
        out.push_back(it->first);
        it = live_.erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }

 private:
  InvalidUsage not_live(const void* handle) const {
    return InvalidUsage(fmt::format("{} {} is not live: freed already, or never given by this library", what_,
                                    handle));
  }

  const char* what_;
  mutable std::mutex mutex_;
  std::unordered_map<const void*, tbcollComm_t> live_;
};

}  // namespace tbcoll::c_api
