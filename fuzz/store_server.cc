// Fuzz target: the rendezvous store's server (src/bootstrap/store_tcp_server.cc), fed the input as one client's
// bytes over a real loopback connection. Seeds hold valid sessions (hello, token, set/get/add/erase requests), so
// mutations explore the server's states, not only its first check.
//   - The server survives (no crash, no sanitizer report) and answers with a well-formed stream: a Welcome, then
//     complete responses with known statuses and bounded values.
//   - Once the client has sent its bytes and closed its side, the server closes the connection promptly (within
//     5 s, far below its own 10 s timers) and holds no session for it: a client that leaves never pins a
//     descriptor or memory.
//   - The store never holds more than kMaxStoredBytes.
// The server is started once (port 0, on 127.0.0.1, job token "fuzz-token") and keeps its values between inputs.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "bootstrap/store_protocol.h"
#include "fuzz_support.h"
#include "tbcoll/store.hpp"

namespace sp = tbcoll::store_protocol;

namespace {

constexpr auto kPrompt = std::chrono::seconds(5);

tbcoll::TcpStoreServer& server() {
  static tbcoll::TcpStoreServer* instance = new tbcoll::TcpStoreServer("127.0.0.1", 0, "fuzz-token");
  return *instance;
}

// Tens of thousands of connections a second run out of ephemeral ports while earlier ones sit in TIME_WAIT:
// connecting from a rotating 127.x.y.z source address (all loopback) widens the space, and a connect refused for
// want of a port (EADDRNOTAVAIL, EADDRINUSE) or while the server's accept queue is full on a loaded machine
// (ECONNREFUSED, ETIMEDOUT; a 10-minute run beside CI met one) is retried for up to 30 s rather than reported as
// the server's fault. A server that stopped accepting still fails, after 30 s, naming the error.
int connect_to_server() {
  static uint32_t source = 0;
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    FUZZ_CHECK(fd >= 0);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    source = source % 0xfffe + 1;
    local.sin_addr.s_addr = htonl(0x7f000000u | (source << 8) | 1u);  // 127.a.b.1
    FUZZ_CHECK(bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) == 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(server().port()));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) return fd;
    const int error = errno;
    close(fd);
    const bool transient = error == EADDRNOTAVAIL || error == EADDRINUSE || error == ECONNREFUSED ||
                           error == ETIMEDOUT || error == EAGAIN || error == EINTR;
    if (!transient || std::chrono::steady_clock::now() >= limit) {
      std::fprintf(stderr, "connect to the store server failed: %s (errno %d)%s\n", std::strerror(error), error,
                   transient ? ", for 30 s" : "");
      FUZZ_CHECK(!"the store server accepts connections");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Everything the server sends until it closes; aborts when it keeps the connection open past kPrompt.
std::vector<uint8_t> read_until_closed(int fd) {
  std::vector<uint8_t> got;
  const auto limit = std::chrono::steady_clock::now() + kPrompt;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(limit - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      std::fprintf(stderr, "the store server kept a connection open %lld s after its client closed its side\n",
                   static_cast<long long>(kPrompt.count()));
      FUZZ_CHECK(!"the server closes a finished connection promptly");
    }
    pollfd watch{fd, POLLIN, 0};
    if (poll(&watch, 1, static_cast<int>(left.count())) <= 0) continue;
    uint8_t buf[65536];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return got;  // closed (or reset)
    got.insert(got.end(), buf, buf + n);
  }
}

// A Welcome, then complete responses.
void check_answers(const std::vector<uint8_t>& got) {
  if (got.empty()) return;  // not a store hello: closed without a word
  FUZZ_CHECK(got.size() >= sizeof(sp::Welcome));
  sp::Welcome welcome;
  std::memcpy(&welcome, got.data(), sizeof(welcome));
  FUZZ_CHECK(welcome.magic == sp::kMagic && welcome.status <= static_cast<uint32_t>(sp::Status::kNoSecret));
  if (welcome.status != 0) FUZZ_CHECK(got.size() == sizeof(welcome));
  size_t at = sizeof(welcome);
  while (at < got.size()) {
    FUZZ_CHECK(got.size() - at >= sizeof(sp::ResponseHeader));
    sp::ResponseHeader response;
    std::memcpy(&response, got.data() + at, sizeof(response));
    FUZZ_CHECK(response.status <= static_cast<uint32_t>(sp::Status::kFull));
    FUZZ_CHECK(response.value_len <= sp::kMaxValueBytes);
    at += sizeof(response);
    FUZZ_CHECK(got.size() - at >= response.value_len);
    at += response.value_len;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = connect_to_server();
  size_t sent = 0;
  while (sent < size) {  // the server may close early (a rejection): stop writing then
    const ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  check_answers(read_until_closed(fd));
  close(fd);
  const auto limit = std::chrono::steady_clock::now() + kPrompt;
  while (server().connections() != 0) {
    FUZZ_CHECK(std::chrono::steady_clock::now() < limit);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  FUZZ_CHECK(server().stored_bytes() <= sp::kMaxStoredBytes);
  return 0;
}
