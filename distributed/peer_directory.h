#pragma once
// Where every rank of a run lives, exchanged through the rendezvous store, so that a
// collective that fails can say which ranks and hosts went away. Gloo's own error only
// names the socket that broke, often a neighbour on the same host that failed in turn;
// instead each rank keeps a listening socket that the kernel answers for as long as the
// process lives, and a failed rank probes everyone's.
#include <chrono>
#include <string>
#include <vector>

namespace c10d {
class Store;
}

namespace fastcpp::distributed {

struct Peer {
  std::string host;     // host name
  std::string address;  // the address through which it reaches the master; its probe listens there
  int probe_port = 0;
};

class PeerDirectory {
 public:
  PeerDirectory() = default;
  PeerDirectory(PeerDirectory&& other) noexcept;
  PeerDirectory& operator=(PeerDirectory&& other) noexcept;
  ~PeerDirectory();

  // Opens this rank's probe socket on `address`, posts {host, address, port} as rank
  // `rank`'s entry and reads every rank's.
  static PeerDirectory exchange(c10d::Store& store, int rank, int world_size, const std::string& host,
                                const std::string& address);

  // The ranks other than `self` whose probe socket does not answer within `timeout`,
  // by host, other hosts first: "ranks 2, 3 (host node1, 10.0.0.2)"; empty when all answer.
  std::string unreachable(int self, std::chrono::milliseconds timeout) const;

 private:
  std::vector<Peer> peers_;
  int probe_fd_ = -1;
};

}  // namespace fastcpp::distributed
