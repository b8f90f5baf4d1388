// A c10d::Store (torch's FileStore, TCPStore, PrefixStore...) as the store tbcoll's rendezvous goes through.
#pragma once

#include <memory>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "tbcoll/store.hpp"

namespace tbcoll::torch_pg {

/// Wraps store; its calls go to torch's C++ store (no GIL needed), get() waiting within the deadline.
std::shared_ptr<Store> wrap_store(c10::intrusive_ptr<c10d::Store> store);

}  // namespace tbcoll::torch_pg
