#include "tools/run/common.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <cstring>

#include "platform/platform.h"

namespace tbcoll::run {

bool make_pipe(int fds[2], bool nonblocking_write) {
  if (pipe(fds) != 0) return false;
  for (int k = 0; k < 2; ++k) {
    fcntl(fds[k], F_SETFD, FD_CLOEXEC);
    if (k == 0 || nonblocking_write) fcntl(fds[k], F_SETFL, fcntl(fds[k], F_GETFL) | O_NONBLOCK);
  }
  return true;
}

void close_pipe(int fds[2]) {
  for (int k = 0; k < 2; ++k) {
    if (fds[k] >= 0) close(fds[k]);
    fds[k] = -1;
  }
}

std::string random_token(size_t bytes) {
  std::vector<unsigned char> random(bytes);
  if (!tbcoll::platform::random_bytes(random.data(), random.size())) return "";
  std::string hex;
  char pair[3];
  for (unsigned char byte : random) {
    std::snprintf(pair, sizeof(pair), "%02x", byte);
    hex += pair;
  }
  return hex;
}

int open_listener(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), "0", &hints, &found) != 0 || found == nullptr) {
    errno = EINVAL;
    return -1;
  }
  int fd = platform::open_socket(found->ai_family, SOCK_STREAM, 0, /*nonblocking=*/false);
  if (fd < 0 || bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
    int saved = errno;
    if (fd >= 0) close(fd);
    freeaddrinfo(found);
    errno = saved;
    return -1;
  }
  freeaddrinfo(found);
  return fd;
}

std::string listener_address(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "";
  char host[NI_MAXHOST] = {};
  char port[NI_MAXSERV] = {};
  if (getnameinfo(reinterpret_cast<sockaddr*>(&address), length, host, sizeof(host), port, sizeof(port),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "";
  }
  return address.ss_family == AF_INET6 ? "[" + std::string(host) + "]:" + port : std::string(host) + ":" + port;
}

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '%') {
      out += "%25";
    } else if (c == '\n') {
      out += "%0A";
    } else {
      out += c;
    }
  }
  return out;
}

std::string unescape(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && text.compare(i, 3, "%25") == 0) {
      out += '%';
      i += 2;
    } else if (text[i] == '%' && text.compare(i, 3, "%0A") == 0) {
      out += '\n';
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::string own_path(const char* argv0) {
  std::string name = argv0 != nullptr ? argv0 : "";
  auto absolute = [](const std::string& path) -> std::string {
    char resolved[PATH_MAX];
    return realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : std::string();
  };
  if (name.find('/') != std::string::npos) return absolute(name);
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t colon = dirs.find(':', start);
    if (colon == std::string::npos) colon = dirs.size();
    const std::string dir = dirs.substr(start, colon - start);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return absolute(candidate);
    start = colon + 1;
  }
  return "";
}

int free_port(const std::string& host) {
  const int fd = open_listener(host);
  if (fd < 0) return 0;
  const std::string address = listener_address(fd);
  close(fd);
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? 0 : std::atoi(address.c_str() + colon + 1);
}

void export_torch_environment(int master_port) {
  const std::pair<const char*, const char*> names[] = {{"TBCOLL_RANK", "RANK"},
                                                       {"TBCOLL_WORLD_SIZE", "WORLD_SIZE"},
                                                       {"TBCOLL_LOCAL_RANK", "LOCAL_RANK"},
                                                       {"TBCOLL_LOCAL_SIZE", "LOCAL_WORLD_SIZE"}};
  for (const auto& [ours, theirs] : names) {
    if (const char* value = std::getenv(ours)) setenv(theirs, value, 1);
  }
  const char* root = std::getenv("TBCOLL_ROOT");
  if (root == nullptr) return;
  const std::string address = root;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return;
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const int port = master_port > 0 ? master_port : std::atoi(address.c_str() + colon + 1) + 1;
  setenv("MASTER_ADDR", host.c_str(), 0);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 0);
}

}  // namespace tbcoll::run
