#include "distributed/process_group.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <random>
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
#include "distributed/forming_group.h"
#include "distributed/network.h"
#include "distributed/peer_directory.h"

namespace fastcpp::distributed {

struct Communicator::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> gloo;  // CPU tensors, and CUDA ones with backend "gloo"
  c10::intrusive_ptr<c10d::Backend> nccl;  // CUDA tensors with backend "auto" or "nccl"
  std::chrono::milliseconds barrier_timeout;
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

std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }
std::vector<uint8_t> bytes_of(int64_t value) { return bytes_of(std::to_string(value)); }
std::string text_of(const std::vector<uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

// The first line of an exception's message, at most 300 characters: c10's carry a C++ trace.
std::string first_line(const std::exception& e) {
  const std::string text = e.what();
  return text.substr(0, std::min(text.find('\n'), size_t{300}));
}

// Every process must agree on WORLD_SIZE, or the group would wait for ranks that never
// come. Each rank posts its own; rank 0 compares all of them, the others compare with
// rank 0's (and acknowledge having read it, so that rank 0 stopping on a mismatch does
// not pull the store away mid-read): both sides stop at once with the same explanation.
// `where` is the master's address, for the error when a rank's value never comes.
void check_world_size(c10d::Store& store, const DistEnv& env, const std::string& where) {
  const std::string key = "fastcpp/world_size/", ack = "fastcpp/world_size_read/";
  auto mismatch = [&](int other, int theirs) {
    return Error("WORLD_SIZE differs between processes: rank " + std::to_string(env.rank) + " has " +
                 std::to_string(env.world_size) + ", rank " + std::to_string(other) + " has " + std::to_string(theirs) +
                 "; start every process with the same WORLD_SIZE");
  };
  int awaited = 0;  // the rank whose value is being read
  auto read = [&](int rank) {
    awaited = rank;
    return std::stoi(text_of(store.get(key + std::to_string(rank))));
  };
  try {
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
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // the store's timeout, or the store gone with rank 0
    const auto who = "rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) + ": rank " +
                     std::to_string(awaited) + " did not post its WORLD_SIZE at the master " + where + " (" +
                     first_line(e) + "); ";
    if (env.rank != 0) throw Error(who + "check that rank 0 runs and that every process has the same WORLD_SIZE");
    throw Error(who + "start all " + std::to_string(env.world_size) + " processes, each with the same WORLD_SIZE");
  }
}

// Under torchrun the agent serves the store, and it outlives the workers: a restarted
// group would read the failed group's keys (its Gloo addresses, its probe ports) and try
// to reach processes that are gone, so each attempt keeps to keys of its own. Torch's
// TORCHELASTIC_RESTART_COUNT cannot name them: every node's agent counts its own
// restarts, and nodes restarted apart would wait under different names for ever. Rank 0
// numbers the attempt in the store instead and hands the number to each rank under a key
// that only the rank's current process knows (a fresh token), and counts the rank in once
// it answers under the new number: no key of an earlier attempt can stand for either.
int64_t agree_on_attempt(c10d::Store& store, const DistEnv& env, std::chrono::milliseconds timeout,
                         const std::string& where) {
  const std::string hello = "fastcpp/hello/", welcome = "fastcpp/welcome/";
  const auto joined = [](int64_t attempt, int rank) {
    return "fastcpp/attempt_" + std::to_string(attempt) + "/joined/" + std::to_string(rank);
  };
  if (env.rank != 0) {
    std::random_device random;
    const auto token = host_name() + "/" + std::to_string(::getpid()) + "/" + std::to_string(env.rank) + "/" +
                       std::to_string(random()) + std::to_string(random());
    store.set(hello + std::to_string(env.rank), bytes_of(token));
    const int64_t attempt = std::stoll(text_of(store.get(welcome + token)));
    store.set(joined(attempt, env.rank), bytes_of(1));
    return attempt;
  }
  const int64_t attempt = store.add("fastcpp/attempts", 1);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int rank = 1; rank < env.world_size; ++rank) {
    // Its hello may still be an earlier process's: each token found there is welcomed
    // until one answers.
    std::string welcomed;
    while (!store.check({joined(attempt, rank)})) {
      if (std::chrono::steady_clock::now() > deadline)
        throw Error("rank 0 of " + std::to_string(env.world_size) + ": rank " + std::to_string(rank) +
                    " did not join attempt " + std::to_string(attempt) + " at the store " + where + " within " +
                    std::to_string(timeout.count() / 1000) + " s; check that every process of the job runs");
      const auto token = text_of(store.get(hello + std::to_string(rank)));
      if (token != welcomed) {
        store.set(welcome + token, bytes_of(attempt));
        welcomed = token;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }
  return attempt;
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
  impl_->barrier_timeout = options.barrier_timeout;
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  const auto rank_text = "rank " + std::to_string(env.rank);
  const bool serves_store = env.rank == 0 && !env.agent_store;
  // Slurm's nodes are distinct hosts (other launchers' "nodes" may share one, in a test):
  // a name that /etc/hosts maps to 127.0.1.1 would leave the other nodes waiting it out.
  if (serves_store && env.source == "slurm" && !env.spans_nodes.empty())
    if (const auto loopback = loopback_address(env.master_addr); !loopback.empty())
      throw Error("rank 0 cannot serve the rendezvous: MASTER_ADDR " + env.master_addr + " is " + loopback +
                  " on this host, a loopback address the other nodes cannot reach (" + env.spans_nodes +
                  "): set MASTER_ADDR to this host's network address, or map its name to that address in /etc/hosts");
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
    // No waiting here for WORLD_SIZE processes to connect: with a different WORLD_SIZE
    // they never would, and the sizes are compared below, at once.
    store_options.waitWorkers = false;
    store_options.timeout = options.rendezvous_timeout;
    if (serves_store) store_options.masterListenFd = listen_fd;
    // Under torchrun's agent store, attempts keep apart by the attempt's number instead.
    c10::intrusive_ptr<c10d::Store> store;
    if (serves_store || env.agent_store)
      store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
    else
      store = connect_to_forming_group(env.master_addr, store_options,
                                       rank_text + " of " + std::to_string(env.world_size), where);
    if (env.agent_store) {
      const auto attempt = agree_on_attempt(*store, env, options.rendezvous_timeout, where);
      store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(attempt), store);
    }
    impl_->store = store;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(rank_text + " of " + std::to_string(env.world_size) + ": cannot rendezvous at the master " + where +
                " within " + std::to_string(options.rendezvous_timeout.count() / 1000) + " s (" + first_line(e) +
                "); check MASTER_ADDR/MASTER_PORT, that rank 0 runs, and WORLD_SIZE on every rank");
  }
  check_world_size(*impl_->store, env, where);
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
  if (serves_store) impl_->store->set(kFormedKey, bytes_of(1));
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
  try {
    auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank_, world_size_, nccl_options);
    // Bound to the rank's device and connected now (torch's init_process_group(device_id=)):
    // no guessing the device from the current one at the first collective.
    nccl->setBoundDeviceId(device);
    nccl->eagerConnectSingleDevice(device);
    impl_->nccl = nccl;
  } catch (const std::exception& e) {  // NCCL's own message names neither the rank nor the host
    throw Error("rank " + std::to_string(rank_) + " of " + std::to_string(world_size_) + " (host " + host_name() +
                "): the NCCL process group on " + device.str() + " did not form: " + first_line(e));
  }
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
