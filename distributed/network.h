#pragma once
// The sockets of a rendezvous across hosts: the store of rank 0 listens on the master
// address alone (not on every interface of the host), and each rank's Gloo transport
// uses the address through which it reaches the master.
#include <string>

namespace fastcpp::distributed {

// A listening TCP socket bound to `host` (a name or an address of this machine) and
// `port` (0: any free one); the caller owns the descriptor. Throws fastcpp::Error
// naming the address when it is not this machine's or the port is taken.
int listen_on(const std::string& host, int port, bool nonblocking = false);

// The local port a bound socket has.
int bound_port(int fd);

// A non-blocking TCP connection to the numeric `address`:`port`, under way (poll for
// POLLOUT, then read SO_ERROR); -1 when it fails at once.
int start_connect(const std::string& address, int port);

// The local address (numeric) this host would use to reach `host`:`port`.
std::string local_address_towards(const std::string& host, int port);

// The address `host` resolves to when every address it resolves to is a loopback one
// (127.0.0.0/8, ::1), which no other host can reach; "" when one is not, or it does not resolve.
std::string loopback_address(const std::string& host);

// This machine's host name.
std::string host_name();

// Makes a write to a socket whose peer is gone fail with EPIPE instead of killing the
// process with SIGPIPE, as Python does at start-up: Gloo writes with writev, which has no
// MSG_NOSIGNAL, so a rank writing to a lost host would die silently (exit status 141)
// instead of naming the lost ranks. A handler the program installed itself is kept.
void ignore_broken_pipe_signal();

}  // namespace fastcpp::distributed
