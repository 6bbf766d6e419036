#include "distributed/network.h"

#include <netdb.h>
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
  if (status != 0) throw Error("cannot resolve the master address '" + host + "': " + gai_strerror(status));
  return AddressList(found, freeaddrinfo);
}

std::string numeric(const sockaddr* address, socklen_t length) {
  char text[NI_MAXHOST] = {};
  if (getnameinfo(address, length, text, sizeof text, nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  return text;
}

}  // namespace

int listen_on(const std::string& host, int port) {
  const auto where = host + ":" + std::to_string(port);
  std::string why = "no address";
  const auto addresses = resolve(host, port, SOCK_STREAM, AI_PASSIVE);
  for (const addrinfo* a = addresses.get(); a; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);  // a restarted group reuses the port at once
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) return fd;
    why = std::strerror(errno);
    close(fd);
  }
  throw Error("rank 0 cannot serve the rendezvous at " + where + " (" + why +
              "): MASTER_ADDR must be an address of the host running rank 0, and MASTER_PORT free");
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

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

}  // namespace fastcpp::distributed
