// The TCP rendezvous store's client: blocking calls, any thread, each on a pooled connection to the server hosted
// by rank 0 (store_tcp_server.cc). The protocol is in store_protocol.h.
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bootstrap/store_auth.h"
#include "bootstrap/store_protocol.h"
#include "common/auth.h"
#include "common/net.h"
#include "tbcoll/error.hpp"
#include "bootstrap/store_auth.h"
#include "tbcoll/store.hpp"

namespace tbcoll {

namespace sp = store_protocol;

namespace {

// Each call runs on a connection of its own, taken from a pool of idle ones (a new one when none is idle): a get
// that waits for its key never holds up other threads' calls (communicators split from one parent share this
// client and may initialise concurrently). A connection whose call failed part-way is closed, not reused: a
// get that timed out still has its answer coming, which would read as the reply to the next call.
class TcpStoreClient final : public Store {
 public:
  TcpStoreClient(const std::string& host_port, const std::string& token, Deadline deadline, std::string secret)
      : where_(host_port), who_(fmt::format("[store] client of {}", host_port)), token_(token),
        secret_(std::move(secret)) {
    const int fd = connect(deadline);
    local_address_ = net::local_address(fd);
    idle_.push_back(fd);
  }
  ~TcpStoreClient() override {
    for (int fd : idle_) close(fd);
  }

  void set(const std::string& key, const std::vector<uint8_t>& value, Deadline deadline) override {
    call(sp::Op::kSet, key, value, deadline);
  }
  std::vector<uint8_t> get(const std::string& key, Deadline deadline) override {
    return call(sp::Op::kGet, key, {}, deadline);
  }
  // Waits on its connection, looking at the flag between polls (not reconnecting in slices).
  std::vector<uint8_t> get(const std::string& key, Deadline deadline, const std::atomic<bool>* cancelled) override {
    return call(sp::Op::kGet, key, {}, deadline, cancelled);
  }
  int64_t add(const std::string& key, int64_t delta, Deadline deadline) override {
    std::vector<uint8_t> value(sizeof(delta));
    std::memcpy(value.data(), &delta, sizeof(delta));
    auto result = call(sp::Op::kAdd, key, value, deadline);
    int64_t out = 0;
    if (result.size() != sizeof(out)) throw RemoteError(who_ + ": malformed add reply");
    std::memcpy(&out, result.data(), sizeof(out));
    return out;
  }
  void erase(const std::string& key, Deadline deadline) override { call(sp::Op::kErase, key, {}, deadline); }

  std::string local_address() const override { return local_address_; }

 private:
  // A new authenticated connection.
  int connect(Deadline deadline) {
    const int fd = net::connect_tcp(net::parse_host_port(where_, "store address"), deadline, who_);
    try {
      if (token_.size() > sp::kMaxTokenBytes) throw InvalidArgument("[store] job token longer than 1024 bytes");
      const bool with_secret = !secret_.empty();
      sp::Hello hello{sp::kMagic, sp::kVersion, with_secret ? sp::kFlagSecret : uint16_t{0},
                      static_cast<uint32_t>(token_.size())};
      const auth::Nonce mine = with_secret ? auth::nonce() : auth::Nonce{};
      std::vector<uint8_t> out(sizeof(hello) + token_.size());
      std::memcpy(out.data(), &hello, sizeof(hello));
      std::memcpy(out.data() + sizeof(hello), token_.data(), token_.size());
      if (with_secret) out.insert(out.end(), mine.begin(), mine.end());
      net::write_all(fd, out.data(), out.size(), deadline, who_);
      auto read_welcome = [&] {
        sp::Welcome welcome{};
        net::read_exact(fd, &welcome, sizeof(welcome), deadline, who_);
        if (welcome.magic != sp::kMagic) throw RemoteError(who_ + ": the server does not speak the store protocol");
        if (welcome.status != 0) {
          throw InvalidUsage(fmt::format("{}: rejected: {}{}", who_, sp::status_text(welcome.status),
                                         welcome.status == static_cast<uint32_t>(sp::Status::kBadToken)
                                             ? " (TBCOLL_TOKEN differs between ranks?)" : ""));
        }
      };
      read_welcome();
      if (with_secret) {  // the store proves the secret first, then we do (store_protocol.h)
        auth::Nonce theirs{};
        auth::Proof their_proof{};
        net::read_exact(fd, theirs.data(), theirs.size(), deadline, who_);
        net::read_exact(fd, their_proof.data(), their_proof.size(), deadline, who_);
        if (!auth::same(their_proof, auth::proof(secret_, sp::kResponderLabel, mine, theirs, token_))) {
          throw RemoteError(who_ + ": the store could not prove it knows the job secret (another job's store, or "
                                   "TBCOLL_SECRET differs between ranks)");
        }
        const auth::Proof proof = auth::proof(secret_, sp::kInitiatorLabel, theirs, mine, token_);
        net::write_all(fd, proof.data(), proof.size(), deadline, who_);
        read_welcome();
      }
    } catch (...) {
      close(fd);
      throw;
    }
    return fd;
  }

  int take(Deadline deadline) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!idle_.empty()) {
        const int fd = idle_.back();
        idle_.pop_back();
        return fd;
      }
    }
    return connect(deadline);
  }

  void give_back(int fd) {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back(fd);
  }

  std::vector<uint8_t> call(sp::Op op, const std::string& key, const std::vector<uint8_t>& value, Deadline deadline,
                            const std::atomic<bool>* cancelled = nullptr) {
    sp::RequestHeader header{static_cast<uint32_t>(op), static_cast<uint32_t>(key.size()),
                             static_cast<uint32_t>(value.size()), 0};
    std::string problem = sp::check_request(header);
    if (!problem.empty()) throw InvalidArgument(fmt::format("{}: bad request for key {:?}: {}", who_, key, problem));
    std::vector<uint8_t> out(sizeof(header) + key.size() + value.size());
    std::memcpy(out.data(), &header, sizeof(header));
    std::memcpy(out.data() + sizeof(header), key.data(), key.size());
    if (!value.empty()) std::memcpy(out.data() + sizeof(header) + key.size(), value.data(), value.size());
    const int fd = take(deadline);
    try {
      net::write_all(fd, out.data(), out.size(), deadline, who_, cancelled);
      sp::ResponseHeader response{};
      net::read_exact(fd, &response, sizeof(response), deadline, who_, cancelled);
      if (response.status != 0) {
        throw RemoteError(fmt::format("{}: the store refused the {} of key {:?}: {}", who_, sp::op_name(op), key,
                                      sp::status_text(response.status)));
      }
      if (response.value_len > sp::kMaxValueBytes) {
        throw RemoteError(fmt::format("{}: the store answered key {:?} with {} bytes (at most {} allowed)", who_, key,
                                      response.value_len, sp::kMaxValueBytes));
      }
      std::vector<uint8_t> result(response.value_len);
      net::read_exact(fd, result.data(), result.size(), deadline, who_);
      give_back(fd);
      return result;
    } catch (const TimeoutError&) {
      close(fd);
      // A get waits for its key (another rank must set it); the other ops only for the store itself.
      if (op == sp::Op::kGet) {
        throw TimeoutError(fmt::format("{}: key {:?} was not set before the deadline (a rank did not get this far, "
                                       "or the store's host, rank 0, stopped answering)", who_, key));
      }
      throw TimeoutError(fmt::format("{}: the store at {} (hosted by rank 0) did not answer a {} of key {:?} before "
                                     "the deadline", who_, where_, sp::op_name(op), key));
    } catch (const IoError& error) {
      close(fd);
      throw IoError(fmt::format("{} (the store is hosted by rank 0: peer 0 died or closed it)", error.what()));
    } catch (...) {
      close(fd);
      throw;
    }
  }

  std::string where_;
  std::string who_;
  std::string token_;
  std::string secret_;  // the job secret ("" for none)
  std::string local_address_;
  std::mutex mutex_;
  std::vector<int> idle_;  // connected, authenticated, no call in flight
};

}  // namespace

std::shared_ptr<Store> connect_tcp_store(const std::string& host_port, const std::string& token, Deadline deadline) {
  return connect_tcp_store(host_port, token, deadline, auth::job_secret_from_env());
}

std::shared_ptr<Store> connect_tcp_store(const std::string& host_port, const std::string& token, Deadline deadline,
                                         const std::string& secret) {
  return std::make_shared<TcpStoreClient>(host_port, token, deadline, secret);
}

namespace bootstrap {
bool is_tcp_client(const Store& store) { return dynamic_cast<const TcpStoreClient*>(&store) != nullptr; }
}  // namespace bootstrap

}  // namespace tbcoll
