// tbcoll._torch_pg: the C++ process group, registered by tbcoll.torch_backend as torch.distributed's "tbcoll".
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <torch/csrc/utils/pybind.h>

#include "process_group.h"

namespace py = pybind11;
using tbcoll::torch_pg::ProcessGroupTbcoll;

PYBIND11_MODULE(_torch_pg, m) {
  m.doc() = "tbcoll's torch.distributed process group in C++ (c10d::ProcessGroup)";
  py::module::import("torch.distributed");  // c10d's ProcessGroup and Store types, which ours derive from
  py::class_<ProcessGroupTbcoll, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupTbcoll>>(m, "ProcessGroupTbcoll")
      .def("transport_name", [](ProcessGroupTbcoll& pg, int peer) { return pg.communicator().transport_name(peer); },
           py::arg("peer"), "The transport that reaches peer (\"shm\", \"tcp\", \"self\", ...).")
      .def("algorithm", [](ProcessGroupTbcoll& pg, const std::string& collective, size_t bytes) {
             return pg.communicator().algorithm(collective, bytes);
           }, py::arg("collective"), py::arg("bytes"), "The algorithm the tuner picks for collective of bytes.");
  m.def("create", &tbcoll::torch_pg::create, py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
        py::call_guard<py::gil_scoped_release>(),
        "Backend.register_backend's creator: a ProcessGroupTbcoll of rank `rank` of `size`, meeting through store.");
}
