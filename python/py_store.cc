#include "py_store.h"

#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include <chrono>
#include <string>

#include <fmt/format.h>

#include "tbcoll/error.hpp"

namespace tbcoll::python {
namespace {

namespace py = pybind11;
using namespace std::chrono;

// The store's calls run on tbcoll's set-up thread, without the GIL: each takes it for the Python call only.
class PythonStore final : public Store {
 public:
  // Under the GIL (the caller's).
  explicit PythonStore(py::object store)
      : store_(std::move(store)), has_wait_(py::hasattr(store_, "wait")), has_delete_(py::hasattr(store_, "delete_key")) {}

  ~PythonStore() override {
    if (!Py_IsInitialized()) {
      store_.release();  // the interpreter is gone (a communicator destroyed at exit): nothing to decrement
      return;
    }
    py::gil_scoped_acquire gil;
    store_ = py::object();
  }

  void set(const std::string& key, const std::vector<uint8_t>& value, Deadline deadline) override {
    call("set", key, deadline, [&] {
      store_.attr("set")(key, py::bytes(reinterpret_cast<const char*>(value.data()), value.size()));
    });
  }

  std::vector<uint8_t> get(const std::string& key, Deadline deadline) override {
    std::vector<uint8_t> out;
    call("get", key, deadline, [&] {
      if (has_wait_) {
        const auto left = duration_cast<milliseconds>(deadline - Clock::now());
        if (left <= milliseconds(0)) throw TimeoutError(fmt::format("store: key {} not set before the deadline", key));
        try {
          py::list keys;
          keys.append(key);
          store_.attr("wait")(keys, left);
        } catch (const py::error_already_set& error) {
          if (Clock::now() >= deadline - milliseconds(1)) {
            throw TimeoutError(fmt::format("store: key {} not set before the deadline ({})", key, error.what()));
          }
          throw;
        }
      }
      const std::string value = py::bytes(store_.attr("get")(key));
      out.assign(value.begin(), value.end());
    });
    return out;
  }
  using Store::get;

  int64_t add(const std::string& key, int64_t delta, Deadline deadline) override {
    int64_t out = 0;
    call("add", key, deadline, [&] { out = store_.attr("add")(key, delta).cast<int64_t>(); });
    return out;
  }

  void erase(const std::string& key, Deadline deadline) override {
    if (!has_delete_) return;
    try {
      call("delete_key", key, deadline, [&] { store_.attr("delete_key")(key); });
    } catch (const Error&) {
      // Stores that cannot delete (c10d's PrefixStore over some stores) keep the record: harmless.
    }
  }

 private:
  template <typename F>
  void call(const char* what, const std::string& key, Deadline deadline, F&& body) {
    py::gil_scoped_acquire gil;
    try {
      body();
    } catch (const py::error_already_set& error) {
      if (Clock::now() >= deadline) throw TimeoutError(fmt::format("store.{}({}): {}", what, key, error.what()));
      throw IoError(fmt::format("store.{}({}) failed: {}", what, key, error.what()));
    } catch (const py::cast_error& error) {
      throw IoError(fmt::format("store.{}({}) returned something unexpected: {}", what, key, error.what()));
    }
  }

  py::object store_;
  bool has_wait_;
  bool has_delete_;
};

}  // namespace

std::shared_ptr<Store> make_python_store(py::object store) {
  for (const char* method : {"set", "get", "add"}) {
    if (!py::hasattr(store, method)) {
      throw InvalidArgument(fmt::format("store: a {} has no {}() method (a store needs set, get and add, as "
                                        "torch.distributed's stores have)",
                                        std::string(py::str(store.get_type().attr("__name__"))), method));
    }
  }
  return std::make_shared<PythonStore>(std::move(store));
}

}  // namespace tbcoll::python
