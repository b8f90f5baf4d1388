// Key-value store used for rendezvous: ranks publish their endpoint addresses and read their peers'.
// Implementations: InMemoryStore (threads of one process) and the TCP store hosted by rank 0.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tbcoll/deadline.hpp"
#include "tbcoll/export.h"

namespace tbcoll {

/// Abstract rendezvous store. All methods are thread-safe.
class TBCOLL_API Store {
 public:
  virtual ~Store() = default;
  /// Sets key to value (overwrites). Blocks until the store acknowledged it or the deadline passed.
  virtual void set(const std::string& key, const std::vector<uint8_t>& value, Deadline deadline) = 0;
  /// Returns the value of key, waiting until some rank set it. Throws TimeoutError past the deadline.
  virtual std::vector<uint8_t> get(const std::string& key, Deadline deadline) = 0;
  /// get(key, deadline) that another thread can cut short. Blocks until key is set (returns its value), the
  /// deadline passed (TimeoutError) or *cancelled is set (InvalidUsage: "... set-up abandoned: the communicator was
  /// aborted"); the flag is looked at at least every 100 ms. cancelled may be null: then nothing cancels, as in
  /// get(key, deadline). The caller owns the flag (another thread sets it); it must outlive the call. Thread-safe.
  /// This default asks get(key, deadline) in slices of 100 ms, looking at the flag between them; a store that can
  /// watch the flag while it waits overrides it (the TCP client waits on its connection, polling the flag).
  /// A class that overrides one get overrides both or says `using Store::get;` (else it hides the other).
  virtual std::vector<uint8_t> get(const std::string& key, Deadline deadline, const std::atomic<bool>* cancelled);
  /// Atomically adds delta to the integer stored at key (0 if absent) and returns the new value. A delta of 0
  /// on an absent key stores nothing (a read of a counter nobody started).
  virtual int64_t add(const std::string& key, int64_t delta, Deadline deadline) = 0;
  /// Removes key if it is set. Communicators remove their rendezvous records once every rank read them, so a
  /// job creating communicators by the thousand does not grow the store. Stores that cannot remove (this
  /// default) keep the records until they go away.
  virtual void erase(const std::string& key, Deadline deadline) {
    (void)key;
    (void)deadline;
  }
  /// The local address of this process's connection to the store, i.e. the interface that reaches the rendezvous
  /// (transports listen there, so peers that reach the store reach them too); "127.0.0.1" for in-process stores
  /// (this default). Does not block; any thread may call it.
  virtual std::string local_address() const { return "127.0.0.1"; }
};

/// A store living in this process, for ranks that are threads. Share one instance among the ranks.
TBCOLL_API std::shared_ptr<Store> make_in_memory_store();

/// Client of the TCP store at host:port. token must match the server's. Connects with the deadline. With a job
/// secret (TBCOLL_SECRET or TBCOLL_SECRET_FILE in the environment, or `secret`), client and store prove to each
/// other that they know it (HMAC-SHA256 challenge-response) before anything else.
TBCOLL_API std::shared_ptr<Store> connect_tcp_store(const std::string& host_port, const std::string& token,
                                                    Deadline deadline);
TBCOLL_API std::shared_ptr<Store> connect_tcp_store(const std::string& host_port, const std::string& token,
                                                    Deadline deadline, const std::string& secret);

/// The TCP store server (hosted by rank 0). Serves until destroyed; malformed clients are dropped.
class TBCOLL_API TcpStoreServer {
 public:
  /// Listens on host:port (port 0 picks a free one). A host name must resolve before the deadline
  /// (TimeoutError otherwise).
  TcpStoreServer(const std::string& host, int port, const std::string& token,
                 Deadline deadline = Clock::now() + std::chrono::seconds(60));
  /// The same with the job secret every client must prove it knows ("" for none; the constructors without it
  /// take TBCOLL_SECRET or TBCOLL_SECRET_FILE from the environment).
  TcpStoreServer(const std::string& host, int port, const std::string& token, Deadline deadline,
                 const std::string& secret);
  /// Serves on listening_fd, a TCP socket already bound and listening (a launcher's, so no other process can
  /// take the port between picking and binding it). Takes ownership of the descriptor.
  TcpStoreServer(int listening_fd, const std::string& token);
  TcpStoreServer(int listening_fd, const std::string& token, const std::string& secret);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  /// The port actually bound.
  int port() const;
  /// Connections rejected so far (bad magic, token, version or framing).
  uint64_t rejected_connections() const;
  /// Clients connected now (every communicator that rendezvoused through this store keeps one while it lives).
  size_t connections() const;
  /// Bytes of keys and values held now.
  uint64_t stored_bytes() const;

 private:
  void start();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tbcoll
