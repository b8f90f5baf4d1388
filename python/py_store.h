// A Python key-value store as tbcoll's rendezvous store: any object with set(key, bytes), get(key) -> bytes,
// add(key, int) -> int and, optionally, wait([keys], timedelta) and delete_key(key), which is what
// torch.distributed's stores (TCPStore, FileStore, PrefixStore...) offer. The torch backend rendezvouses through
// the store c10d hands it this way, so no TBCOLL_ROOT is needed under torchrun.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "tbcoll/store.hpp"

namespace tbcoll::python {

std::shared_ptr<Store> make_python_store(pybind11::object store);

}  // namespace tbcoll::python
