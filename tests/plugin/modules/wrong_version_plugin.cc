// A transport plug-in that states another interface version than the headers it was built with: the library must
// refuse to load it (load_plugin throws InvalidArgument naming the file) and never call its create_device.
#include <cstdlib>
#include <memory>

#include "tbcoll/transport.hpp"

namespace {

std::shared_ptr<tbcoll::transport::Device> create_device() { std::abort(); }  // the library must not call it

}  // namespace

extern "C" __attribute__((visibility("default"))) const tbcoll::transport::Plugin* tbcoll_transport_plugin() {
  static const tbcoll::transport::Plugin plugin{tbcoll::transport::kInterfaceVersion + 100, "wrongversion",
                                                &create_device};
  return &plugin;
}
