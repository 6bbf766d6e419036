#pragma once
// Joining a group while it forms. Rank 0 marks the store it serves once its group has
// formed. Such a rank 0 outlives its group's failure for a while (until a collective
// tells it, and its launcher stops it), and a rank restarted meanwhile would read the
// failed group's keys there (WORLD_SIZE, Gloo's addresses) and try to reach processes
// that are gone: one that finds the mark waits for the next rank 0's store instead.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <string>

namespace fastcpp::distributed {

extern const std::string kFormedKey;  // set by rank 0 once its group has formed

// A client of the store at `host` that holds no kFormedKey, waiting up to
// options.timeout for one (the old rank 0's store may close at any moment and its
// successor's open: a dropped connection is tried again). The store returned keeps
// options.timeout for its later waits. Errors name `who` and `where` (the master).
c10::intrusive_ptr<c10d::Store> connect_to_forming_group(const std::string& host, c10d::TCPStoreOptions options,
                                                         const std::string& who, const std::string& where);

}  // namespace fastcpp::distributed
