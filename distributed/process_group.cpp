#include "distributed/process_group.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <sstream>
#include <thread>
#if FASTCPP_HAS_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if FASTCPP_HAS_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "core/device.h"
#include "core/error.h"
#include "distributed/network.h"
#include "distributed/peer_directory.h"

namespace fastcpp::distributed {

struct Communicator::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> gloo;  // CPU tensors, and CUDA ones with backend "gloo"
  c10::intrusive_ptr<c10d::Backend> nccl;  // CUDA tensors with backend "auto" or "nccl"
  std::chrono::milliseconds timeout, barrier_timeout;
  PeerDirectory peers;
  // A collective failed (a peer lost): NCCL's graceful shutdown would wait on it.
  std::atomic<bool> failed{false};

  c10d::Backend& backend_for(const torch::Tensor& tensor) {
    if (tensor.is_cuda() && nccl) return *nccl;
    if (!gloo) throw Error("this build has no Gloo (no Gloo headers at configure time): CPU tensors cannot be reduced");
    return *gloo;
  }
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

namespace {
// Never destroyed: the group's threads must outlive every user, up to exit.
std::shared_ptr<Communicator>* const the_process_communicator = new std::shared_ptr<Communicator>();
}  // namespace

std::shared_ptr<Communicator> process_communicator(const DistEnv& env, ProcessGroupOptions options) {
  auto& shared = *the_process_communicator;
  if (!shared) {
    shared = std::make_shared<Communicator>(env, options);
    // Before CUDA's own teardown (atexit runs in reverse order), as destroy_process_group would.
    std::atexit([] { (*the_process_communicator)->shutdown(); });
  } else {
    shared->require(options);
  }
  return shared;
}

void rank0_first(const std::function<void()>& fn, ProcessGroupOptions options) {
  const auto env = read_env();
  if (env.world_size == 1) return fn();  // nobody to go first
  auto comm = process_communicator(env, std::move(options));
  if (env.rank == 0) fn();
  comm->barrier();
  if (env.rank != 0) fn();
}

namespace {

// "auto", "gloo" or "nccl" as the backend of CUDA tensors, checked against the device.
std::string resolve_backend(const ProcessGroupOptions& options) {
  const auto& asked = options.backend;
  if (asked != "auto" && asked != "gloo" && asked != "nccl")
    throw Error("process group backend '" + asked + "' is unknown: use auto, gloo or nccl");
  if (asked == "nccl" && !options.device.is_cuda())
    throw Error("process group backend nccl needs a CUDA model, and this one is on " + options.device.str() +
                ": use backend gloo (or auto, which picks Gloo for the CPU)");
#if !FASTCPP_HAS_NCCL
  if (asked == "nccl") throw Error("process group backend nccl is not in this build (torch without CUDA/NCCL): use gloo");
  return "gloo";
#else
  if (asked == "auto") return options.device.is_cuda() ? "nccl" : "gloo";
  return asked;
#endif
}

}  // namespace

Communicator::Communicator(const DistEnv& env, ProcessGroupOptions options)
    : impl_(std::make_unique<Impl>()), rank_(env.rank), world_size_(env.world_size), backend_("gloo") {
  resolve_backend(options);  // bad options fail before any rendezvous
  ignore_broken_pipe_signal();
  impl_->timeout = options.timeout;
  impl_->barrier_timeout = options.barrier_timeout;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  const auto rank_text = "rank " + std::to_string(env.rank);
  const auto first_line = [](const std::exception& e) {
    const std::string text = e.what();
    return text.substr(0, std::min(text.find('\n'), size_t{300}));
  };
  const bool serves_store = env.rank == 0 && !env.agent_store;
  int listen_fd = -1;
  // Only the master address listens: torch's store would listen on every interface.
  if (serves_store) try {
      listen_fd = listen_on(env.master_addr, env.master_port);
    } catch (const Error& e) {
      throw Error("rank 0 cannot serve the rendezvous: " + std::string(e.what()) +
                  ": MASTER_ADDR must be an address of the host running rank 0, and MASTER_PORT free");
    }
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(env.master_port);
    store_options.isServer = serves_store;
    store_options.numWorkers = static_cast<size_t>(env.world_size);
    store_options.waitWorkers = true;
    store_options.timeout = options.timeout;
    if (serves_store) store_options.masterListenFd = listen_fd;
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
    // Under torchrun the store outlives restarts: each attempt keeps to its own keys, as torch does.
    if (env.agent_store)
      store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(env.restart_count), store);
    impl_->store = store;
  } catch (const std::exception& e) {
    throw Error(rank_text + " of " + std::to_string(env.world_size) + ": cannot rendezvous at the master " + where +
                " within " + std::to_string(options.timeout.count() / 1000) + " s (" + first_line(e) +
                "); check MASTER_ADDR/MASTER_PORT, that rank 0 runs, and WORLD_SIZE on every rank");
  }
  check_world_size(*impl_->store, env);
  const auto address = local_address_towards(env.master_addr, env.master_port);
  try {
    impl_->peers = PeerDirectory::exchange(*impl_->store, env.rank, env.world_size, host_name(), address);
  } catch (const c10::Error& e) {  // the store's wait for a rank that left after the rendezvous
    throw Error(rank_text + ": the other ranks' addresses did not arrive from the master " + where + " (" +
                first_line(e) + ")");
  }
#if FASTCPP_HAS_GLOO
  // Gloo uses the interfaces GLOO_SOCKET_IFNAME names (comma-separated), as in torch, or
  // else the one through which this host reaches the master.
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
  const char* interfaces = std::getenv("GLOO_SOCKET_IFNAME");
  std::istringstream names(interfaces ? interfaces : "");
  for (std::string name; std::getline(names, name, ',');)
    if (!name.empty()) gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
  if (gloo_options->devices.empty())
    gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(address));
  try {
    auto store = c10::make_intrusive<c10d::PrefixStore>("gloo", impl_->store);
    impl_->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, gloo_options);
  } catch (const std::exception& e) {
    throw Error(rank_text + ": the Gloo process group at " + where + " did not form: " + first_line(e));
  }
#endif
  require(options);
}

void Communicator::require(const ProcessGroupOptions& options) {
  const auto backend = resolve_backend(options);
  if (backend != "nccl" || impl_->nccl) return;
#if FASTCPP_HAS_NCCL
  const auto device = check_device(options.device, "the NCCL process group");
  c10::cuda::set_device(device.index());
  auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
  nccl_options->timeout = options.nccl_timeout;
  auto store = c10::make_intrusive<c10d::PrefixStore>("nccl", impl_->store);
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank_, world_size_, nccl_options);
  // Bound to the rank's device and connected now (torch's init_process_group(device_id=)):
  // no guessing the device from the current one at the first collective.
  nccl->setBoundDeviceId(device);
  nccl->eagerConnectSingleDevice(device);
  impl_->nccl = nccl;
  backend_ = "nccl";
#endif
}

Communicator::~Communicator() = default;

void Communicator::shutdown() {
  if (impl_->nccl) {
    if (impl_->failed) impl_->nccl->abort();  // no waiting for the work a lost peer left pending
    else impl_->nccl->shutdown();
  }
  impl_->nccl.reset();
}


void Communicator::wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) const {
  try {
    work->wait();
  } catch (const std::exception& e) {
    impl_->failed = true;
    const std::string error = e.what();
    // A dying peer's sockets close one after another, and a lost host's processes die one
    // after another: probe again until two probes agree (at most 5 probes, 200 ms apart).
    std::string lost, previous;
    for (int attempt = 0; attempt < 5; ++attempt) {
      if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      lost = impl_->peers.unreachable(rank_, std::chrono::seconds(2));
      if (!lost.empty() && lost == previous) break;
      previous = lost;
    }
    throw Error(what + " failed on rank " + std::to_string(rank_) + " (host " + host_name() + "): " +
                (lost.empty() ? "a peer died or timed out" : "lost " + lost) + ": " +
                error.substr(0, error.find('\n')).substr(0, 300));
  }
}

c10::intrusive_ptr<c10d::Work> Communicator::all_reduce_async(torch::Tensor& tensor) {
  std::vector<torch::Tensor> tensors{tensor};
  return impl_->backend_for(tensor).allreduce(tensors);
}

void Communicator::all_reduce_sum(torch::Tensor& tensor) { wait(all_reduce_async(tensor), "all_reduce"); }

void Communicator::broadcast(torch::Tensor& tensor, int root) {
  std::vector<torch::Tensor> tensors{tensor};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  wait(impl_->backend_for(tensor).broadcast(tensors, options), "broadcast");
}

torch::Tensor Communicator::all_gather(const torch::Tensor& tensor) {
  // Into one flat tensor (all_gather_into_tensor): no per-rank copies out of a buffer.
  auto input = tensor.contiguous().view(-1);
  auto output = torch::empty({world_size_ * input.numel()}, input.options());
  wait(impl_->backend_for(tensor)._allgather_base(output, input), "all_gather");
  std::vector<int64_t> sizes{world_size_};
  sizes.insert(sizes.end(), tensor.sizes().begin(), tensor.sizes().end());
  return output.view(sizes);
}

void Communicator::barrier() {
  // The long wait through Gloo, which honours the barrier's own timeout: NCCL's barrier
  // is an all-reduce under the group's timeout (its watchdog would abort a rank that
  // waits out a peer's checkpoint longer than that). Then through NCCL when there is one,
  // everybody there by now, so that the barrier orders NCCL work too.
  if (!impl_->gloo && !impl_->nccl) impl_->backend_for(torch::empty({0}));  // throws its "no Gloo" error
  c10d::BarrierOptions options;
  options.timeout = impl_->barrier_timeout;
  if (impl_->gloo) wait(impl_->gloo->barrier(options), "barrier");
  if (impl_->nccl) wait(impl_->nccl->barrier(), "barrier");
}

}  // namespace fastcpp::distributed
