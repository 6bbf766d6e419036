#include "distributed/forming_group.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/error.h"

namespace fastcpp::distributed {

const std::string kFormedKey = "fastcpp/formed";

c10::intrusive_ptr<c10d::Store> connect_to_forming_group(const std::string& host, c10d::TCPStoreOptions options,
                                                         const std::string& who, const std::string& where) {
  using Clock = std::chrono::steady_clock;
  const auto timeout = options.timeout;
  const auto deadline = Clock::now() + timeout;
  bool seen_formed = false;  // then the old group's store is why we wait, whatever the last try met
  while (true) {
    // Each try connects for the time left, not a fresh full timeout.
    options.timeout = std::max(std::chrono::milliseconds(1),
                               std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    try {
      auto store = c10::make_intrusive<c10d::TCPStore>(host, options);
      if (!store->check({kFormedKey})) {
        store->setTimeout(timeout);  // the group's later waits get the whole rendezvous timeout
        return store;
      }
      seen_formed = true;
    } catch (const c10::DistError&) {
      if (Clock::now() > deadline && !seen_formed) throw;
    }
    if (Clock::now() > deadline)
      throw Error(who + ": the store at " + where + " is that of a group formed before this process started, " +
                  "and no new rank 0 replaced it within " + std::to_string(timeout.count() / 1000) +
                  " s; stop that group's processes, or give this run another MASTER_PORT");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace fastcpp::distributed
