#include "distributed/network.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace fastcpp::distributed {
namespace {

using AddressList = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

AddressList resolve(const std::string& host, int port, int socket_type, int flags) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socket_type;
  hints.ai_flags = flags;
  addrinfo* found = nullptr;
  const int status = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (status != 0) throw Error("cannot resolve the address '" + host + "': " + gai_strerror(status));
  return AddressList(found, freeaddrinfo);
}

std::string numeric(const sockaddr* address, socklen_t length) {
  char text[NI_MAXHOST] = {};
  if (getnameinfo(address, length, text, sizeof text, nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  return text;
}

}  // namespace

int listen_on(const std::string& host, int port, bool nonblocking) {
  std::string why = "no address";
  const auto addresses = resolve(host, port, SOCK_STREAM, AI_PASSIVE);
  for (const addrinfo* a = addresses.get(); a; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | (nonblocking ? SOCK_NONBLOCK : 0), a->ai_protocol);
    if (fd < 0) continue;
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);  // a restarted group reuses the port at once
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) return fd;
    why = std::strerror(errno);
    close(fd);
  }
  throw Error("cannot listen on " + host + ":" + std::to_string(port) + " (" + why + ")");
}

int bound_port(int fd) {
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  char service[NI_MAXSERV] = {};
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0 ||
      getnameinfo(reinterpret_cast<sockaddr*>(&bound), length, nullptr, 0, service, sizeof service, NI_NUMERICSERV) != 0)
    throw Error(std::string("cannot read a socket's port: ") + std::strerror(errno));
  return std::stoi(service);
}

int start_connect(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return -1;
  int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) != 0 && errno != EINPROGRESS) {
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  return fd;
}

std::string local_address_towards(const std::string& host, int port) {
  const auto addresses = resolve(host, port, SOCK_DGRAM, 0);
  for (const addrinfo* a = addresses.get(); a; a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    // Connecting a UDP socket sends nothing: it only picks the route and source address.
    const bool found = connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
                       getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
    close(fd);
    if (found) return numeric(reinterpret_cast<sockaddr*>(&local), length);
  }
  throw Error("no route from this host to the master address " + host + ":" + std::to_string(port));
}

std::string loopback_address(const std::string& host) {
  AddressList addresses(nullptr, freeaddrinfo);
  try {
    addresses = resolve(host, 0, SOCK_STREAM, 0);
  } catch (const Error&) {
    return "";
  }
  for (const addrinfo* a = addresses.get(); a; a = a->ai_next) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
    const bool loopback = a->ai_family == AF_INET ? ntohl(v4->sin_addr.s_addr) >> 24 == 127
                                                  : a->ai_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
    if (!loopback) return "";
  }
  return addresses ? numeric(addresses->ai_addr, addresses->ai_addrlen) : "";
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

void ignore_broken_pipe_signal() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, nullptr);
}

}  // namespace fastcpp::distributed
