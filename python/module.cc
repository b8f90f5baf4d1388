// tbcoll._tbcoll: the Python binding of the C++ API (python/tbcoll/__init__.py re-exports it).
//
// Buffers are taken zero-copy (buffers.h); the GIL is released while a call waits; every tbcoll error is raised as
// the Python exception of the same class (tbcoll.TimeoutError is also a builtin TimeoutError, InvalidArgument a
// ValueError, IoError an OSError), with the same message. Asynchronous calls return a Work that holds the buffers
// until the call completed; a Work dropped unfinished waits for its call first, so memory tbcoll still writes is
// never freed.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "buffers.h"
#include "py_store.h"
#include "tbcoll/tbcoll.hpp"

namespace tbcoll::python {
namespace {

namespace py = pybind11;

PyObject* g_error = nullptr;
PyObject* g_invalid_argument = nullptr;
PyObject* g_invalid_usage = nullptr;
PyObject* g_mismatch = nullptr;
PyObject* g_timeout = nullptr;
PyObject* g_io = nullptr;
PyObject* g_remote = nullptr;

PyObject* new_exception(py::module_& m, const char* name, py::tuple bases, const char* doc) {
  const std::string qualified = std::string("tbcoll.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.attr(name) = py::handle(type);
  return type;
}

void register_exceptions(py::module_& m) {
  py::module_ builtins = py::module_::import("builtins");
  g_error = new_exception(m, "Error", py::make_tuple(builtins.attr("RuntimeError")), "Any tbcoll failure.");
  py::handle error(g_error);
  g_invalid_argument = new_exception(m, "InvalidArgument", py::make_tuple(error, builtins.attr("ValueError")),
                                     "A bad argument (dtype, size, rank, buffer).");
  g_invalid_usage =
      new_exception(m, "InvalidUsage", py::make_tuple(error), "A call the communicator's state does not allow.");
  g_mismatch = new_exception(m, "MismatchError", py::make_tuple(py::handle(g_invalid_usage)),
                             "Ranks made different calls (collective, size, dtype, root).");
  g_timeout = new_exception(m, "TimeoutError", py::make_tuple(error, builtins.attr("TimeoutError")),
                            "The communicator's deadline passed.");
  g_io = new_exception(m, "IoError", py::make_tuple(error, builtins.attr("OSError")),
                       "A connection or system call failed (a peer died, say).");
  g_remote = new_exception(m, "RemoteError", py::make_tuple(error), "A peer reported a failure.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const MismatchError& e) {
      PyErr_SetString(g_mismatch, e.what());
    } catch (const InvalidArgument& e) {
      PyErr_SetString(g_invalid_argument, e.what());
    } catch (const InvalidUsage& e) {
      PyErr_SetString(g_invalid_usage, e.what());
    } catch (const TimeoutError& e) {
      PyErr_SetString(g_timeout, e.what());
    } catch (const IoError& e) {
      PyErr_SetString(g_io, e.what());
    } catch (const RemoteError& e) {
      PyErr_SetString(g_remote, e.what());
    } catch (const Error& e) {
      PyErr_SetString(g_error, e.what());
    }
  });
}

ReduceOp op_from_python(const py::handle& value) {
  if (PyUnicode_Check(value.ptr())) {  // the common case, without building std::strings
    static const std::pair<const char*, ReduceOp> kNames[] = {{"sum", ReduceOp::kSum}, {"prod", ReduceOp::kProd},
                                                                {"max", ReduceOp::kMax}, {"min", ReduceOp::kMin},
                                                                {"avg", ReduceOp::kAvg}};
    for (const auto& [name, op] : kNames) {
      if (PyUnicode_CompareWithASCIIString(value.ptr(), name) == 0) return op;
    }
  }
  if (py::isinstance<ReduceOp>(value)) return value.cast<ReduceOp>();
  return parse_op(py::str(value));
}

std::optional<DataType> optional_dtype(const py::object& value) {
  if (value.is_none()) return std::nullopt;
  return dtype_from_python(value);
}

/// Memory registered with a communicator's transports, and the Python object that owns the memory (held while
/// the registration lives, so the memory stays mapped).
struct PyRegistration {
  py::object owner;  // (declared first: destroyed after the registration)
  MemoryRegistration registration;
  void close() {
    registration.reset();
    owner = py::none();
  }
};

/// An asynchronous call: the C++ Work and the buffers it uses.
class PyWork {
 public:
  PyWork(Work work, py::list keep) : work_(std::move(work)), keep_(std::move(keep)) {}
  PyWork(const PyWork&) = delete;
  PyWork& operator=(const PyWork&) = delete;
  ~PyWork() {
    if (keep_.size() == 0) return;
    try {
      py::gil_scoped_release release;
      work_.wait();  // the buffers must outlive the call; it has the communicator's deadline
    } catch (...) {
      // The error went to whoever waited, or nobody wants it: the buffers can go now.
    }
  }

  void wait() {
    {
      py::gil_scoped_release release;
      work_.wait();
    }
    keep_ = py::list();
  }
  bool test() {
    const bool done = work_.test();
    if (done) keep_ = py::list();
    return done;
  }
  int source() const { return work_.source(); }

 private:
  Work work_;
  py::list keep_;
};

/// A communicator as Python sees it: closable, usable by one thread at a time (a second thread gets an error
/// rather than racing), abortable from any thread.
class PyComm {
 public:
  explicit PyComm(Communicator comm) : comm_(std::make_unique<Communicator>(std::move(comm))) {}

  Communicator& get() {
    if (!comm_) throw InvalidUsage("the communicator was closed");
    return *comm_;
  }
  int rank() { return get().rank(); }
  int size() { return get().size(); }

  void close() {
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) throw InvalidUsage("close(): another thread is in a call on this communicator");
    py::gil_scoped_release release;
    comm_.reset();
  }
  void abort() {
    if (comm_) comm_->abort();  // any thread, even while another is in a call
  }

  // Runs f with the GIL released and the communicator held by this thread.
  template <typename F>
  auto run(const char* call, F&& f) {
    Communicator& comm = get();
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) {
      throw InvalidUsage(fmt::format("{}: another thread is in a call on this communicator (rank {}); a "
                                     "communicator is used by one thread at a time",
                                     call, comm.rank()));
    }
    py::gil_scoped_release release;
    return f(comm);
  }

 private:
  std::unique_ptr<Communicator> comm_;
  std::mutex mutex_;
};

void check_same(const View& a, const char* a_name, const View& b, const char* b_name, size_t b_count) {
  if (a.dtype != b.dtype) {
    throw InvalidArgument(fmt::format("{} is {} but {} is {}: both must have one dtype", a_name, to_string(a.dtype),
                                      b_name, to_string(b.dtype)));
  }
  if (b.count != b_count) {
    throw InvalidArgument(fmt::format("{} has {} elements; it must have {} ({} has {})", b_name, b.count, b_count,
                                      a_name, a.count));
  }
}

// The owners of the buffers an asynchronous call uses.
py::list keep(const View& a, const View& b) {
  py::list out;
  if (a.owner) out.append(a.owner);
  if (b.owner && !b.owner.is(a.owner)) out.append(b.owner);
  return out;
}

// The result of a call: the Work when asynchronous, else the output object.
template <typename Start, typename Blocking>
py::object finish(PyComm& self, bool async_op, py::object out, const View& a, const View& b, const char* call,
                  Start&& start, Blocking&& blocking) {
  if (async_op) {
    Work work = self.run(call, start);
    return py::cast(std::make_unique<PyWork>(std::move(work), keep(a, b)));
  }
  self.run(call, blocking);
  return out;
}

py::object all_reduce(PyComm& self, py::object send, py::object recv, py::object op, py::object dtype,
                      bool async_op) {
  const auto forced = optional_dtype(dtype);
  const ReduceOp reduce = op_from_python(op);
  if (recv.is_none()) recv = send;
  View s = view_of(send, "send", recv.is(send), forced);
  View r = recv.is(send) ? s : view_of(recv, "recv", true, forced);
  check_same(s, "send", r, "recv", s.count);
  return finish(
      self, async_op, recv, s, r, "all_reduce",
      [&](Communicator& c) { return c.all_reduce_async(s.data, r.data, s.count, s.dtype, reduce); },
      [&](Communicator& c) { c.all_reduce(s.data, r.data, s.count, s.dtype, reduce); });
}

py::object all_gather(PyComm& self, py::object send, py::object recv, py::object dtype, bool async_op) {
  const auto forced = optional_dtype(dtype);
  View s = view_of(send, "send", false, forced);
  View r = view_of(recv, "recv", true, forced);
  check_same(s, "send", r, "recv", s.count * static_cast<size_t>(self.size()));
  return finish(
      self, async_op, recv, s, r, "all_gather",
      [&](Communicator& c) { return c.all_gather_async(s.data, r.data, s.count, s.dtype); },
      [&](Communicator& c) { c.all_gather(s.data, r.data, s.count, s.dtype); });
}

py::object reduce_scatter(PyComm& self, py::object send, py::object recv, py::object op, py::object dtype,
                          bool async_op) {
  const auto forced = optional_dtype(dtype);
  const ReduceOp reduce = op_from_python(op);
  View s = view_of(send, "send", false, forced);
  View r = view_of(recv, "recv", true, forced);
  const size_t n = static_cast<size_t>(self.size());
  if (s.count % n != 0) {
    throw InvalidArgument(fmt::format("send has {} elements, not a multiple of the {} ranks", s.count, n));
  }
  check_same(s, "send", r, "recv", s.count / n);
  return finish(
      self, async_op, recv, s, r, "reduce_scatter",
      [&](Communicator& c) { return c.reduce_scatter_async(s.data, r.data, r.count, s.dtype, reduce); },
      [&](Communicator& c) { c.reduce_scatter(s.data, r.data, r.count, s.dtype, reduce); });
}

py::object reduce(PyComm& self, py::object send, py::object recv, py::object op, int root, py::object dtype,
                  bool async_op) {
  const auto forced = optional_dtype(dtype);
  const ReduceOp reduce_op = op_from_python(op);
  const bool at_root = self.rank() == root;
  if (recv.is_none() && at_root) recv = send;
  View s = view_of(send, "send", at_root && recv.is(send), forced);
  View r;
  if (at_root) {
    r = recv.is(send) ? s : view_of(recv, "recv", true, forced);
    check_same(s, "send", r, "recv", s.count);
  }
  return finish(
      self, async_op, recv, s, r, "reduce",
      [&](Communicator& c) { return c.reduce_async(s.data, r.data, s.count, s.dtype, reduce_op, root); },
      [&](Communicator& c) { c.reduce(s.data, r.data, s.count, s.dtype, reduce_op, root); });
}

py::object broadcast(PyComm& self, py::object buf, py::object recv, int root, py::object dtype, bool async_op) {
  const auto forced = optional_dtype(dtype);
  if (recv.is_none()) recv = buf;
  const bool in_place = recv.is(buf);
  View s = view_of(buf, "buf", in_place, forced);
  View r = in_place ? s : view_of(recv, "recv", true, forced);
  check_same(s, "buf", r, "recv", s.count);
  return finish(
      self, async_op, recv, s, r, "broadcast",
      [&](Communicator& c) { return c.broadcast_async(s.data, r.data, s.count, s.dtype, root); },
      [&](Communicator& c) { c.broadcast(s.data, r.data, s.count, s.dtype, root); });
}

py::object all_to_all(PyComm& self, py::object send, py::object recv, py::object dtype, bool async_op) {
  const auto forced = optional_dtype(dtype);
  if (recv.is_none()) recv = send;
  const bool in_place = recv.is(send);
  View s = view_of(send, "send", in_place, forced);
  View r = in_place ? s : view_of(recv, "recv", true, forced);
  const size_t n = static_cast<size_t>(self.size());
  if (s.count % n != 0) {
    throw InvalidArgument(fmt::format("send has {} elements, not {} equal blocks (one per rank)", s.count, n));
  }
  check_same(s, "send", r, "recv", s.count);
  const size_t count = s.count / n;
  return finish(
      self, async_op, recv, s, r, "all_to_all",
      [&](Communicator& c) { return c.all_to_all_async(s.data, r.data, count, s.dtype); },
      [&](Communicator& c) { c.all_to_all(s.data, r.data, count, s.dtype); });
}

std::vector<size_t> per_rank(const py::object& values, const char* what, size_t n) {
  if (values.is_none()) return {};
  std::vector<size_t> out;
  for (const auto& v : values) {
    if (!py::isinstance<py::int_>(v) && !py::hasattr(v, "__index__")) {
      throw InvalidArgument(fmt::format("{} entry {} is {}, not an integer", what, out.size(),
                                        py::str(py::type::of(v)).cast<std::string>()));
    }
    const long long value = py::reinterpret_borrow<py::object>(v).attr("__index__")().cast<long long>();
    if (value < 0) throw InvalidArgument(fmt::format("{} entry {} is {}: counts and displacements are not negative",
                                                     what, out.size(), value));
    out.push_back(static_cast<size_t>(value));
  }
  if (out.size() != n) {
    throw InvalidArgument(fmt::format("{} has {} entries; it needs one per rank ({})", what, out.size(), n));
  }
  return out;
}

py::object all_to_allv(PyComm& self, py::object send, py::object recv, py::object send_counts,
                       py::object recv_counts, py::object send_displs, py::object recv_displs, py::object dtype,
                       bool async_op) {
  const auto forced = optional_dtype(dtype);
  const size_t n = static_cast<size_t>(self.size());
  const bool in_place = recv.is(send);
  View s = view_of(send, "send", in_place, forced);
  View r = in_place ? s : view_of(recv, "recv", true, forced);
  if (s.dtype != r.dtype) {
    throw InvalidArgument(fmt::format("send is {} but recv is {}", to_string(s.dtype), to_string(r.dtype)));
  }
  auto sc = per_rank(send_counts, "send_counts", n), rc = per_rank(recv_counts, "recv_counts", n);
  auto sd = per_rank(send_displs, "send_displs", n), rd = per_rank(recv_displs, "recv_displs", n);
  if (sc.empty() || rc.empty()) throw InvalidArgument("all_to_allv needs send_counts and recv_counts");
  // Each block must lie inside its buffer (the library checks overlaps; the extent is known here only).
  auto check_extent = [&](const std::vector<size_t>& counts, const std::vector<size_t>& displs, const View& v,
                          const char* what) {
    size_t at = 0;
    for (size_t p = 0; p < n; ++p) {
      const size_t start = displs.empty() ? at : displs[p];
      if (start > v.count || counts[p] > v.count - start) {
        throw InvalidArgument(fmt::format("{}: block {} ({} elements at {}) runs past its {} elements", what, p,
                                          counts[p], start, v.count));
      }
      at = start + counts[p];
    }
  };
  check_extent(sc, sd, s, "send");
  check_extent(rc, rd, r, "recv");
  const size_t* sdp = sd.empty() ? nullptr : sd.data();
  const size_t* rdp = rd.empty() ? nullptr : rd.data();
  return finish(
      self, async_op, recv, s, r, "all_to_allv",
      [&](Communicator& c) {
        return c.all_to_allv_async(s.data, r.data, sc.data(), sdp, rc.data(), rdp, s.dtype);
      },
      [&](Communicator& c) { c.all_to_allv(s.data, r.data, sc.data(), sdp, rc.data(), rdp, s.dtype); });
}

py::object gather(PyComm& self, py::object send, py::object recv, int root, py::object dtype, bool async_op) {
  const auto forced = optional_dtype(dtype);
  View s = view_of(send, "send", false, forced);
  View r;
  if (self.rank() == root) {
    r = view_of(recv, "recv", true, forced);
    check_same(s, "send", r, "recv", s.count * static_cast<size_t>(self.size()));
  }
  return finish(
      self, async_op, recv, s, r, "gather",
      [&](Communicator& c) { return c.gather_async(s.data, r.data, s.count, s.dtype, root); },
      [&](Communicator& c) { c.gather(s.data, r.data, s.count, s.dtype, root); });
}

py::object scatter(PyComm& self, py::object send, py::object recv, int root, py::object dtype, bool async_op) {
  const auto forced = optional_dtype(dtype);
  View r = view_of(recv, "recv", true, forced);
  View s;
  if (self.rank() == root) {
    s = view_of(send, "send", false, forced);
    check_same(r, "recv", s, "send", r.count * static_cast<size_t>(self.size()));
  }
  return finish(
      self, async_op, recv, s, r, "scatter",
      [&](Communicator& c) { return c.scatter_async(s.data, r.data, r.count, r.dtype, root); },
      [&](Communicator& c) { c.scatter(s.data, r.data, r.count, r.dtype, root); });
}

// Raw forms for the torch backend, which holds its tensors itself and passes data_ptr()s: no buffer export on
// the fast path. Pointers must stay valid until the call (or its Work) completed.
template <typename F>
py::object raw(PyComm& self, bool async_op, const char* call, F&& f) {
  if (async_op) {
    Work work = self.run(call, [&](Communicator& c) { return f(c, true); });
    return py::cast(std::make_unique<PyWork>(std::move(work), py::list()));
  }
  self.run(call, [&](Communicator& c) { return f(c, false); });
  return py::none();
}

void* ptr(uintptr_t address) { return reinterpret_cast<void*>(address); }

Config make_config(py::object rank, py::object size, py::object root, py::object timeout, py::object transport,
                   py::object algo, py::object token, py::object knobs, py::object store, py::object prefix) {
  Config config = Config::from_env();
  if (!rank.is_none()) config.rank = rank.cast<int>();
  if (!size.is_none()) config.world_size = size.cast<int>();
  if (!root.is_none()) config.root = root.cast<std::string>();
  if (!timeout.is_none()) config.timeout_s = timeout.cast<double>();
  if (!transport.is_none()) config.transport = transport.cast<std::string>();
  if (!algo.is_none()) config.algo = algo.cast<std::string>();
  if (!token.is_none()) config.token = token.cast<std::string>();
  if (!knobs.is_none()) config.knobs = knobs.cast<std::map<std::string, std::string>>();
  if (!prefix.is_none()) config.prefix = prefix.cast<std::string>();
  if (!store.is_none()) config.store = make_python_store(store);
  return config;
}

}  // namespace

PYBIND11_MODULE(_tbcoll, m) {
  m.doc() = "tbcoll: collectives for CPU clusters (shared memory, TCP, RDMA) - the C++ library's binding";
  register_exceptions(m);

  py::enum_<DataType>(m, "DataType")
      .value("int8", DataType::kInt8)
      .value("uint8", DataType::kUint8)
      .value("int32", DataType::kInt32)
      .value("uint32", DataType::kUint32)
      .value("int64", DataType::kInt64)
      .value("uint64", DataType::kUint64)
      .value("float16", DataType::kFloat16)
      .value("float32", DataType::kFloat32)
      .value("float64", DataType::kFloat64)
      .value("bfloat16", DataType::kBfloat16);
  py::enum_<ReduceOp>(m, "ReduceOp")
      .value("SUM", ReduceOp::kSum)
      .value("PROD", ReduceOp::kProd)
      .value("MAX", ReduceOp::kMax)
      .value("MIN", ReduceOp::kMin)
      .value("AVG", ReduceOp::kAvg);

  py::class_<PyWork>(m, "Work", "Handle of an asynchronous call: wait() blocks (GIL released), test() polls.")
      .def("wait", &PyWork::wait, "Blocks until the call finished; raises its error.")
      .def("test", &PyWork::test, "True once the call finished (raises its error); never blocks.")
      .def_property_readonly("source", &PyWork::source,
                             "The rank a receive took its message from (irecv, irecv_any) once it finished, else -1.");

  py::class_<PyRegistration>(m, "Registration",
                             "Memory registered with a communicator's transports (Communicator.register_memory); "
                             "close() or the end of a with block deregisters it.")
      .def_property_readonly("transports", [](PyRegistration& self) { return self.registration.transports(); },
                             "How many of the communicator's transports took the memory.")
      .def("close", &PyRegistration::close)
      .def("__enter__", [](PyRegistration& self) -> PyRegistration& { return self; },
           py::return_value_policy::reference)
      .def("__exit__", [](PyRegistration& self, py::args) {
        self.close();
        return false;
      });

  py::class_<UniqueId>(m, "UniqueId", "What the ranks of a new communicator need to meet (NCCL's unique id).")
      .def_static("create", &UniqueId::create, "Starts a rendezvous store in this process (TBCOLL_SOCKET_ADDR).")
      .def_static("from_string", &UniqueId::from_string)
      .def("to_string", &UniqueId::to_string)
      .def("__str__", &UniqueId::to_string);

  py::class_<PyComm>(m, "Communicator")
      .def_property_readonly("rank", &PyComm::rank)
      .def_property_readonly("size", &PyComm::size)
      .def_property_readonly("broken", [](PyComm& self) { return self.get().broken(); })
      .def("transport_name", [](PyComm& self, int peer) { return self.get().transport_name(peer); }, py::arg("peer"))
      .def("algorithm", [](PyComm& self, const std::string& collective, size_t bytes) {
             return self.get().algorithm(collective, bytes);
           }, py::arg("collective"), py::arg("nbytes"))
      .def("all_reduce", &all_reduce, py::arg("send"), py::arg("recv") = py::none(), py::arg("op") = "sum",
           py::arg("dtype") = py::none(), py::arg("async_op") = false)
      .def("all_gather", &all_gather, py::arg("send"), py::arg("recv"), py::arg("dtype") = py::none(),
           py::arg("async_op") = false)
      .def("reduce_scatter", &reduce_scatter, py::arg("send"), py::arg("recv"), py::arg("op") = "sum",
           py::arg("dtype") = py::none(), py::arg("async_op") = false)
      .def("reduce", &reduce, py::arg("send"), py::arg("recv") = py::none(), py::arg("op") = "sum",
           py::arg("root") = 0, py::arg("dtype") = py::none(), py::arg("async_op") = false)
      .def("broadcast", &broadcast, py::arg("buf"), py::arg("recv") = py::none(), py::arg("root") = 0,
           py::arg("dtype") = py::none(), py::arg("async_op") = false)
      .def("all_to_all", &all_to_all, py::arg("send"), py::arg("recv") = py::none(), py::arg("dtype") = py::none(),
           py::arg("async_op") = false)
      .def("all_to_allv", &all_to_allv, py::arg("send"), py::arg("recv"), py::arg("send_counts"),
           py::arg("recv_counts"), py::arg("send_displs") = py::none(), py::arg("recv_displs") = py::none(),
           py::arg("dtype") = py::none(), py::arg("async_op") = false)
      .def("gather", &gather, py::arg("send"), py::arg("recv") = py::none(), py::arg("root") = 0,
           py::arg("dtype") = py::none(), py::arg("async_op") = false)
      .def("scatter", &scatter, py::arg("send"), py::arg("recv"), py::arg("root") = 0, py::arg("dtype") = py::none(),
           py::arg("async_op") = false)
      .def("barrier", [](PyComm& self, bool async_op) -> py::object {
             return finish(self, async_op, py::none(), View(), View(), "barrier",
                           [](Communicator& c) { return c.barrier_async(); }, [](Communicator& c) { c.barrier(); });
           }, py::arg("async_op") = false)
      .def("send", [](PyComm& self, py::object buf, int peer, py::object dtype) {
             View v = view_of(buf, "buf", false, optional_dtype(dtype));
             self.run("send", [&](Communicator& c) { c.send(v.data, v.count, v.dtype, peer); });
           }, py::arg("buf"), py::arg("peer"), py::arg("dtype") = py::none())
      .def("recv", [](PyComm& self, py::object buf, int peer, py::object dtype) {
             View v = view_of(buf, "buf", true, optional_dtype(dtype));
             self.run("recv", [&](Communicator& c) { c.recv(v.data, v.count, v.dtype, peer); });
             return buf;
           }, py::arg("buf"), py::arg("peer"), py::arg("dtype") = py::none())
      .def("isend", [](PyComm& self, py::object buf, int peer, py::object dtype) {
             View v = view_of(buf, "buf", false, optional_dtype(dtype));
             Work work = self.run("isend", [&](Communicator& c) { return c.isend(v.data, v.count, v.dtype, peer); });
             return std::make_unique<PyWork>(std::move(work), keep(v, View()));
           }, py::arg("buf"), py::arg("peer"), py::arg("dtype") = py::none(),
           "Non-blocking send: returns a Work at once (two ranks may both irecv, then isend); buf stays alive and "
           "unchanged until it completed.")
      .def("irecv", [](PyComm& self, py::object buf, int peer, py::object dtype) {
             View v = view_of(buf, "buf", true, optional_dtype(dtype));
             Work work = self.run("irecv", [&](Communicator& c) { return c.irecv(v.data, v.count, v.dtype, peer); });
             return std::make_unique<PyWork>(std::move(work), keep(v, View()));
           }, py::arg("buf"), py::arg("peer"), py::arg("dtype") = py::none(),
           "Non-blocking receive from peer into buf (see isend): wait() or test() on the Work it returns.")
      .def("irecv_any", [](PyComm& self, py::object buf, py::object dtype) {
             View v = view_of(buf, "buf", true, optional_dtype(dtype));
             Work work = self.run("irecv_any", [&](Communicator& c) { return c.irecv_any(v.data, v.count, v.dtype); });
             return std::make_unique<PyWork>(std::move(work), keep(v, View()));
           }, py::arg("buf"), py::arg("dtype") = py::none(),
           "Non-blocking receive from whichever peer sends first (MPI's ANY_SOURCE): the Work's source names it "
           "once it finished.")
      .def("recv_any", [](PyComm& self, py::object buf, py::object dtype) {
             View v = view_of(buf, "buf", true, optional_dtype(dtype));
             return self.run("recv_any", [&](Communicator& c) { return c.recv_any(v.data, v.count, v.dtype); });
           }, py::arg("buf"), py::arg("dtype") = py::none(),
           "Receives into buf from whichever peer sends first; returns that peer's rank.")
      .def("group_start", [](PyComm& self) { self.run("group_start", [](Communicator& c) { c.group_start(); }); })
      .def("group_end", [](PyComm& self) { self.run("group_end", [](Communicator& c) { c.group_end(); }); })
      .def("split", [](PyComm& self, int color, int key) -> py::object {
             auto out = self.run("split", [&](Communicator& c) { return c.split(color, key); });
             if (!out) return py::none();
             return py::cast(std::make_unique<PyComm>(std::move(*out)));
           }, py::arg("color"), py::arg("key") = 0)
      .def("register_memory", [](PyComm& self, py::object buf) {
             View v = view_of(buf, "buf", /*writable=*/false, std::nullopt);
             const size_t bytes = v.count * dtype_size(v.dtype);
             auto out = std::make_unique<PyRegistration>();
             out->registration = self.run("register_memory", [&](Communicator& c) {
               return c.register_memory(v.data, bytes);
             });
             out->owner = std::move(v.owner);
             return out;
           }, py::arg("buf"),
           "Registers buf's memory with the transports (as ncclCommRegister): sends from it then go without a "
           "copy where a transport can (RDMA). The Registration keeps buf alive until closed.")
      .def("abort", &PyComm::abort, "Breaks the communicator and closes its connections; any thread.")
      .def("close", &PyComm::close, "Destroys the communicator now (its resources go; further calls raise).")
      // Raw pointer forms for the torch backend (tbcoll.torch_backend).
      .def("_all_reduce_raw", [](PyComm& self, uintptr_t send, uintptr_t recv, size_t count, DataType dtype,
                                 ReduceOp op, bool async_op) {
             return raw(self, async_op, "all_reduce", [&](Communicator& c, bool a) {
               return a ? c.all_reduce_async(ptr(send), ptr(recv), count, dtype, op)
                        : (c.all_reduce(ptr(send), ptr(recv), count, dtype, op), Work());
             });
           })
      .def("_all_gather_raw", [](PyComm& self, uintptr_t send, uintptr_t recv, size_t count, DataType dtype,
                                 bool async_op) {
             return raw(self, async_op, "all_gather", [&](Communicator& c, bool a) {
               return a ? c.all_gather_async(ptr(send), ptr(recv), count, dtype)
                        : (c.all_gather(ptr(send), ptr(recv), count, dtype), Work());
             });
           })
      .def("_reduce_scatter_raw", [](PyComm& self, uintptr_t send, uintptr_t recv, size_t count, DataType dtype,
                                     ReduceOp op, bool async_op) {
             return raw(self, async_op, "reduce_scatter", [&](Communicator& c, bool a) {
               return a ? c.reduce_scatter_async(ptr(send), ptr(recv), count, dtype, op)
                        : (c.reduce_scatter(ptr(send), ptr(recv), count, dtype, op), Work());
             });
           })
      .def("_reduce_raw", [](PyComm& self, uintptr_t send, uintptr_t recv, size_t count, DataType dtype, ReduceOp op,
                             int root, bool async_op) {
             return raw(self, async_op, "reduce", [&](Communicator& c, bool a) {
               return a ? c.reduce_async(ptr(send), ptr(recv), count, dtype, op, root)
                        : (c.reduce(ptr(send), ptr(recv), count, dtype, op, root), Work());
             });
           })
      .def("_broadcast_raw", [](PyComm& self, uintptr_t send, uintptr_t recv, size_t count, DataType dtype, int root,
                                bool async_op) {
             return raw(self, async_op, "broadcast", [&](Communicator& c, bool a) {
               return a ? c.broadcast_async(ptr(send), ptr(recv), count, dtype, root)
                        : (c.broadcast(ptr(send), ptr(recv), count, dtype, root), Work());
             });
           })
      // For benchmarks/torch_allreduce.py: `iters` all_reduces in a C++ loop (no Python between calls), seconds;
      // with per_call, each call's own time (ns, timed as the Python loop times its calls).
      .def("_all_reduce_loop", [](PyComm& self, uintptr_t buf, size_t count, DataType dtype, int iters,
                                  bool per_call) -> py::object {
             std::vector<int64_t> each(per_call ? static_cast<size_t>(std::max(iters, 0)) : 0);
             const double seconds = self.run("all_reduce", [&](Communicator& c) {
               const auto start = Clock::now();
               for (int i = 0; i < iters; ++i) {
                 const auto before = per_call ? Clock::now() : start;
                 c.all_reduce(ptr(buf), ptr(buf), count, dtype, ReduceOp::kSum);
                 if (per_call) {
                   each[static_cast<size_t>(i)] =
                       std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - before).count();
                 }
               }
               return std::chrono::duration<double>(Clock::now() - start).count();
             });
             if (per_call) return py::cast(each);
             return py::float_(seconds);
           }, py::arg("buf"), py::arg("count"), py::arg("dtype"), py::arg("iters"), py::arg("per_call") = false)
      .def("_gather_raw", [](PyComm& self, uintptr_t send, uintptr_t recv, size_t count, DataType dtype, int root,
                             bool async_op) {
             return raw(self, async_op, "gather", [&](Communicator& c, bool a) {
               return a ? c.gather_async(ptr(send), ptr(recv), count, dtype, root)
                        : (c.gather(ptr(send), ptr(recv), count, dtype, root), Work());
             });
           })
      .def("_scatter_raw", [](PyComm& self, uintptr_t send, uintptr_t recv, size_t count, DataType dtype, int root,
                              bool async_op) {
             return raw(self, async_op, "scatter", [&](Communicator& c, bool a) {
               return a ? c.scatter_async(ptr(send), ptr(recv), count, dtype, root)
                        : (c.scatter(ptr(send), ptr(recv), count, dtype, root), Work());
             });
           })
      .def("_send_raw", [](PyComm& self, uintptr_t buf, size_t count, DataType dtype, int peer) {
             self.run("send", [&](Communicator& c) { c.send(ptr(buf), count, dtype, peer); });
           })
      .def("_recv_raw", [](PyComm& self, uintptr_t buf, size_t count, DataType dtype, int peer) {
             self.run("recv", [&](Communicator& c) { c.recv(ptr(buf), count, dtype, peer); });
           })
      .def("_isend_raw", [](PyComm& self, uintptr_t buf, size_t count, DataType dtype, int peer) {
             Work work = self.run("isend", [&](Communicator& c) { return c.isend(ptr(buf), count, dtype, peer); });
             return std::make_unique<PyWork>(std::move(work), py::list());
           })
      .def("_irecv_raw", [](PyComm& self, uintptr_t buf, size_t count, DataType dtype, int peer) {
             Work work = self.run("irecv", [&](Communicator& c) { return c.irecv(ptr(buf), count, dtype, peer); });
             return std::make_unique<PyWork>(std::move(work), py::list());
           })
      .def("_irecv_any_raw", [](PyComm& self, uintptr_t buf, size_t count, DataType dtype) {
             Work work = self.run("irecv_any", [&](Communicator& c) { return c.irecv_any(ptr(buf), count, dtype); });
             return std::make_unique<PyWork>(std::move(work), py::list());
           });

  m.def("init", [](py::object rank, py::object size, py::object root, py::object timeout, py::object transport,
                   py::object algo, py::object token, py::object knobs, py::object store, py::object prefix) {
          Config config = make_config(rank, size, root, timeout, transport, algo, token, knobs, store, prefix);
          py::gil_scoped_release release;  // set-up waits for every rank (a Python store takes the GIL per call)
          return std::make_unique<PyComm>(Communicator::init(config));
        },
        py::arg("rank") = py::none(), py::arg("size") = py::none(), py::arg("root") = py::none(),
        py::arg("timeout") = py::none(), py::arg("transport") = py::none(), py::arg("algo") = py::none(),
        py::arg("token") = py::none(), py::arg("knobs") = py::none(), py::arg("store") = py::none(),
        py::arg("prefix") = py::none());
  m.def("init_with_id", [](const UniqueId& id, int rank, int size, py::object timeout, py::object transport,
                           py::object algo, py::object knobs) {
          Config config = make_config(py::none(), py::none(), py::none(), timeout, transport, algo, py::none(), knobs,
                                      py::none(), py::none());
          py::gil_scoped_release release;
          return std::make_unique<PyComm>(Communicator::init(id, rank, size, config));
        },
        py::arg("unique_id"), py::arg("rank"), py::arg("size"), py::arg("timeout") = py::none(),
        py::arg("transport") = py::none(), py::arg("algo") = py::none(), py::arg("knobs") = py::none());
  m.def("dtype_size", [](py::object dtype) { return dtype_size(dtype_from_python(dtype)); });
}

}  // namespace tbcoll::python
