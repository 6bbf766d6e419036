#include "distributed/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include "learner/error.h"

namespace fastcpp::distributed {

struct Communicator::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
};

namespace {

std::vector<uint8_t> bytes_of(int value) {
  const auto text = std::to_string(value);
  return {text.begin(), text.end()};
}

// Every process must agree on WORLD_SIZE, or the group would wait for ranks that never
// come. Each rank posts its own; rank 0 compares all of them, the others compare with
// rank 0's (and acknowledge having read it, so that rank 0 stopping on a mismatch does
// not pull the store away mid-read): both sides stop at once with the same explanation.
void check_world_size(c10d::Store& store, const DistEnv& env) {
  const std::string key = "fastcpp/world_size/", ack = "fastcpp/world_size_read/";
  auto mismatch = [&](int other, int theirs) {
    return Error("WORLD_SIZE differs between processes: rank " + std::to_string(env.rank) + " has " +
                 std::to_string(env.world_size) + ", rank " + std::to_string(other) + " has " + std::to_string(theirs) +
                 "; start every process with the same WORLD_SIZE");
  };
  auto read = [&](int rank) {
    const auto value = store.get(key + std::to_string(rank));
    return std::stoi(std::string(value.begin(), value.end()));
  };
  store.set(key + std::to_string(env.rank), bytes_of(env.world_size));
  if (env.rank != 0) {
    const int theirs = read(0);
    store.set(ack + std::to_string(env.rank), bytes_of(1));
    if (theirs != env.world_size) throw mismatch(0, theirs);
    return;
  }
  for (int other = 1; other < env.world_size; ++other) {
    const int theirs = read(other);
    if (theirs == env.world_size) continue;
    try {
      store.wait({ack + std::to_string(other)}, std::chrono::seconds(5));
    } catch (const std::exception&) {  // it stopped anyway
    }
    throw mismatch(other, theirs);
  }
}

}  // namespace

std::shared_ptr<Communicator> process_communicator(const DistEnv& env, ProcessGroupOptions options) {
  // Never destroyed: the group's threads must outlive every user, up to exit.
  static auto* shared = new std::shared_ptr<Communicator>();
  if (!*shared) *shared = std::make_shared<Communicator>(env, std::move(options));
  return *shared;
}

void rank0_first(const std::function<void()>& fn, ProcessGroupOptions options) {
  const auto env = read_env();
  if (!env.is_distributed()) return fn();
  auto comm = process_communicator(env, std::move(options));
  if (env.rank == 0) fn();
  comm->barrier();
  if (env.rank != 0) fn();
}

Communicator::Communicator(const DistEnv& env, ProcessGroupOptions options)
    : impl_(std::make_unique<Impl>()), rank_(env.rank), world_size_(env.world_size), backend_(options.backend) {
  if (backend_ == "auto") backend_ = "gloo";
  if (backend_ != "gloo")
    throw Error("process group backend '" + options.backend + "' is not available in this build; use gloo");
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(env.master_port);
    store_options.isServer = env.rank == 0 && !env.agent_store;
    store_options.numWorkers = static_cast<size_t>(env.world_size);
    store_options.waitWorkers = true;
    store_options.timeout = options.timeout;
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
    // Under torchrun the store outlives restarts: each attempt keeps to its own keys, as torch does.
    if (env.agent_store)
      store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(env.restart_count), store);
    impl_->store = store;
  } catch (const std::exception& e) {
    throw Error("rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) +
                ": cannot rendezvous at the master " + where + " within " +
                std::to_string(options.timeout.count() / 1000) + " s (" +
                std::string(e.what()).substr(0, std::string(e.what()).find('\n')) +
                "); check MASTER_ADDR/MASTER_PORT, that rank 0 runs, and WORLD_SIZE on every rank");
  }
  check_world_size(*impl_->store, env);
  auto gloo_options = c10d::ProcessGroupGloo::Options::create();
  gloo_options->timeout = options.timeout;
  gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(env.master_addr));
  try {
    impl_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, env.rank, env.world_size, gloo_options);
  } catch (const std::exception& e) {
    throw Error("rank " + std::to_string(env.rank) + ": the Gloo process group at " + where +
                " did not form: " + std::string(e.what()).substr(0, 300));
  }
}

Communicator::~Communicator() = default;

c10d::ProcessGroup& Communicator::group() { return *impl_->group; }

namespace {

void wait(const c10::intrusive_ptr<c10d::Work>& work, const char* what, int rank) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    throw Error(std::string(what) + " failed on rank " + std::to_string(rank) + " (a peer died or timed out?): " +
                std::string(e.what()).substr(0, 300));
  }
}

}  // namespace

void Communicator::all_reduce_sum(torch::Tensor& tensor) {
  std::vector<torch::Tensor> tensors{tensor};
  wait(impl_->group->allreduce(tensors), "all_reduce", rank_);
}

void Communicator::broadcast(torch::Tensor& tensor, int root) {
  std::vector<torch::Tensor> tensors{tensor};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  wait(impl_->group->broadcast(tensors, options), "broadcast", rank_);
}

std::vector<torch::Tensor> Communicator::all_gather(const torch::Tensor& tensor) {
  std::vector<std::vector<torch::Tensor>> outputs(1);
  for (int r = 0; r < world_size_; ++r) outputs[0].push_back(torch::empty_like(tensor));
  std::vector<torch::Tensor> inputs{tensor.contiguous()};
  wait(impl_->group->allgather(outputs, inputs), "all_gather", rank_);
  return outputs[0];
}

void Communicator::barrier() { wait(impl_->group->barrier(), "barrier", rank_); }

}  // namespace fastcpp::distributed
