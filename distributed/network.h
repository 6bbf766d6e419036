#pragma once
// The sockets of a rendezvous across hosts: the store of rank 0 listens on the master
// address alone (not on every interface of the host), and each rank's Gloo transport
// uses the address through which it reaches the master.
#include <string>

namespace fastcpp::distributed {

// A listening TCP socket bound to `host` (a name or an address of this machine) and
// `port`; the caller owns the descriptor. Throws fastcpp::Error naming the address
// when it is not this machine's or the port is taken.
int listen_on(const std::string& host, int port);

// The local address (numeric) this host would use to reach `host`:`port`.
std::string local_address_towards(const std::string& host, int port);

// This machine's host name.
std::string host_name();

}  // namespace fastcpp::distributed
