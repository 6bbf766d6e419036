#include "distributed/peer_directory.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <cerrno>
#include <map>
#include <sstream>

#include "distributed/network.h"

namespace fastcpp::distributed {
namespace {

const std::string kKey = "fastcpp/peer/";

}  // namespace

PeerDirectory::PeerDirectory(PeerDirectory&& other) noexcept { *this = std::move(other); }

PeerDirectory& PeerDirectory::operator=(PeerDirectory&& other) noexcept {
  std::swap(peers_, other.peers_);
  std::swap(probe_fd_, other.probe_fd_);
  return *this;
}

PeerDirectory::~PeerDirectory() {
  if (probe_fd_ >= 0) close(probe_fd_);
}

PeerDirectory PeerDirectory::exchange(c10d::Store& store, int rank, int world_size, const std::string& host,
                                      const std::string& address) {
  PeerDirectory directory;
  // The kernel completes connections to it without this process doing anything;
  // non-blocking, so that unreachable() can empty its queue of finished probes.
  directory.probe_fd_ = listen_on(address, 0, /*nonblocking=*/true);
  const auto entry = host + "\n" + address + "\n" + std::to_string(bound_port(directory.probe_fd_));
  store.set(kKey + std::to_string(rank), std::vector<uint8_t>(entry.begin(), entry.end()));
  for (int r = 0; r < world_size; ++r) {
    const auto value = store.get(kKey + std::to_string(r));
    std::istringstream lines(std::string(value.begin(), value.end()));
    Peer peer;
    std::string port_text;
    std::getline(lines, peer.host);
    std::getline(lines, peer.address);
    std::getline(lines, port_text);
    peer.probe_port = std::atoi(port_text.c_str());
    directory.peers_.push_back(peer);
  }
  return directory;
}

std::string PeerDirectory::unreachable(int self, std::chrono::milliseconds timeout) const {
  // The other ranks' probes wait in this socket's queue until accepted: a full queue
  // would leave later probes unanswered, and this rank reported lost.
  for (int connection; (connection = accept4(probe_fd_, nullptr, nullptr, SOCK_CLOEXEC)) >= 0;) close(connection);
  // Every probe at once: a dead process's port refuses at once, a lost host never answers.
  std::vector<pollfd> probes;
  std::vector<int> probed, lost;
  for (int r = 0; r < static_cast<int>(peers_.size()); ++r) {
    if (r == self) continue;
    const auto& peer = peers_[static_cast<size_t>(r)];
    const int fd = start_connect(peer.address, peer.probe_port);
    if (fd < 0) lost.push_back(r);
    else probes.push_back({fd, POLLOUT, 0}), probed.push_back(r);
  }
  std::vector<bool> answered(probes.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (size_t waiting = probes.size(); waiting > 0;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    if (poll(probes.data(), probes.size(), static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    for (size_t i = 0; i < probes.size(); ++i) {
      if (probes[i].fd < 0 || probes[i].revents == 0) continue;
      int error = 0;
      socklen_t length = sizeof error;
      getsockopt(probes[i].fd, SOL_SOCKET, SO_ERROR, &error, &length);
      answered[i] = error == 0 && !(probes[i].revents & (POLLERR | POLLHUP));
      close(probes[i].fd);
      probes[i].fd = -1;  // poll skips it from now on
      --waiting;
    }
  }
  for (size_t i = 0; i < probes.size(); ++i) {
    if (probes[i].fd >= 0) close(probes[i].fd);
    if (!answered[i]) lost.push_back(probed[i]);
  }
  std::sort(lost.begin(), lost.end());
  if (lost.empty()) return "";
  // Grouped by host, other hosts before this one: a whole host gone is the likely cause.
  std::map<std::pair<bool, std::string>, std::vector<int>> by_host;
  for (int r : lost) {
    const auto& peer = peers_[static_cast<size_t>(r)];
    by_host[{peer.address == peers_[static_cast<size_t>(self)].address, peer.address}].push_back(r);
  }
  std::string text;
  for (const auto& [key, group] : by_host) {
    if (!text.empty()) text += " and ";
    text += group.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < group.size(); ++i) text += (i ? ", " : "") + std::to_string(group[i]);
    const auto& peer = peers_[static_cast<size_t>(group[0])];
    text += " (host " + peer.host + ", " + peer.address + ")";
  }
  return text;
}

}  // namespace fastcpp::distributed
