// Distributed training on the CPU with Gloo: two processes against one, and the
// errors a user meets when the processes cannot meet.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>
#include <tuple>
#include <utility>

#include "channels_last_batchnorm_check.h"
#include "helpers.h"
#include "distributed/validation_gather.h"
#include "operator_count.h"
#include "synced_arithmetic.h"
#include "worker_process.h"
#include "distributed/batchnorm_math.h"
#include "distributed/forming_group.h"
#include "distributed/network.h"
#include "distributed/reducer.h"
#include "optim/param_groups.h"
#ifdef FASTCPP_HAS_CUDA
#include "distributed/channels_last_batchnorm_kernels.h"
#endif

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

// The unused-parameter runs train with Adam, whose step m / sqrt(v) is about lr for a
// gradient component of any size: where one is near 0, the rounding that tells the mean of
// 8 items apart from the mean of two means of 4 moves the weight by more than 1e-6.
constexpr double kAdamAtol = 1e-5;

// Runs a command line with sh; returns its exit status.
int run_command(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Four linear layers applied last-registered first: backward produces the gradients of the
// first-registered layer first, the opposite of the Reducer's first guess.
struct ReversedLayers : torch::nn::Module {
  ReversedLayers() {
    for (int i = 0; i < 4; ++i) layers.push_back(register_module("l" + std::to_string(i), torch::nn::Linear(6, 6)));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) x = torch::tanh((*it)(x));
    return x;
  }
  std::vector<torch::nn::Linear> layers;
};

// A linear layer over another's weight (tied weights, as a language model's embedding and
// output layer): the model's parameters() lists that tensor twice.
struct TiedDecoderImpl : torch::nn::Module {
  explicit TiedDecoderImpl(torch::Tensor shared) { weight = register_parameter("weight", std::move(shared)); }
  torch::Tensor forward(const torch::Tensor& x) { return torch::nn::functional::linear(x, weight); }
  torch::Tensor weight;
};
TORCH_MODULE(TiedDecoder);

struct TiedLayers : torch::nn::Module {
  TiedLayers() {
    encoder = register_module("encoder", torch::nn::Linear(6, 6));
    middle = register_module("middle", torch::nn::Linear(6, 6));
    decoder = register_module("decoder", TiedDecoder(encoder->weight));
  }
  torch::Tensor forward(torch::Tensor x) { return decoder(torch::tanh(middle(torch::tanh(encoder(x))))); }
  torch::nn::Linear encoder{nullptr}, middle{nullptr};
  TiedDecoder decoder{nullptr};
};

// One synchronized backward through `reducer`, the gradients dropped before it as zero_grad does.
void reduced_backward(distributed::Reducer& reducer, torch::nn::Module& model, const std::function<torch::Tensor()>& loss) {
  for (auto& param : model.parameters()) param.mutable_grad() = torch::Tensor();
  reducer.prepare();
  loss().backward();
  reducer.finalize();
}

distributed::DistEnv env_of(int rank, int world, int port) {
  distributed::DistEnv env;
  env.rank = rank, env.world_size = world, env.master_port = port;
  return env;
}

// The message of whatever `f` throws: a fastcpp::Error's as it is, any other marked, so
// that a raw c10 error fails a comparison instead of the test run.
std::string any_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("(not a fastcpp::Error) ") + e.what();
  }
  return "(nothing thrown)";
}

// Runs `rank` as ranks 0 and 1, rank 1 in a thread of its own; returns what each threw
// (any_error_of's "(nothing thrown)" when nothing).
std::array<std::string, 2> in_two_threads(const std::function<void(int)>& rank) {
  std::array<std::string, 2> errors;
  std::thread rank1([&] { errors[1] = any_error_of([&] { rank(1); }); });
  errors[0] = any_error_of([&] { rank(0); });
  rank1.join();
  return errors;
}

// Starts fastcpp-launch with `args`, its stdout to /dev/null and its stderr to `stderr_fd`
// (-1: this process's), the signals it stops on as their defaults whatever this process
// was started with (nohup's ignored SIGHUP, a shell's for background jobs). Returns its pid.
pid_t spawn_launcher(const std::vector<std::string>& args, int stderr_fd = -1) {
  std::vector<std::string> line{FASTCPP_LAUNCH};
  line.insert(line.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& arg : line) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  if (stderr_fd >= 0) posix_spawn_file_actions_adddup2(&actions, stderr_fd, 2);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t defaults, none;
  sigemptyset(&defaults);
  for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&defaults, signal);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  const int failed = posix_spawn(&pid, argv[0], &actions, &attributes, argv.data(), environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(failed == 0);
  return pid;
}

// Whether a process runs: neither gone nor a zombie (whose parent may never reap it: an
// orphan's new parent here may be a PID 1 that does not).
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto state = text.rfind(") ");
  return state != std::string::npos && state + 2 < text.size() && text[state + 2] != 'Z';
}

// The lines of a file, waiting up to `seconds` for it to have `n` of them.
std::vector<std::string> await_lines(const std::string& path, size_t n, int seconds = 30) {
  std::vector<std::string> lines;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    lines.clear();
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  } while (lines.size() < n && std::chrono::steady_clock::now() < deadline);
  return lines;
}

using Variables = std::vector<std::pair<std::string, std::string>>;

// Launchers' variables set as given for a scope, the others unset (a test run under Slurm
// or MPI has its own); all of them as they were afterwards.
class LauncherVariables {
 public:
  explicit LauncherVariables(const Variables& values) {
    for (const char* name : kNames) {
      if (const char* value = std::getenv(name)) saved_.emplace_back(name, value);
      ::unsetenv(name);
    }
    for (const auto& [name, value] : values) {
      REQUIRE(std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames));
      ::setenv(name.c_str(), value.c_str(), 1);
    }
  }
  ~LauncherVariables() {
    for (const char* name : kNames) ::unsetenv(name);
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  static constexpr const char* kNames[] = {
      "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
      "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
      "SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_NODEID", "SLURM_JOB_NUM_NODES", "SLURM_NNODES",
      "SLURM_STEP_NUM_NODES", "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
      "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_JOB_ID",
      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
  std::vector<std::pair<std::string, std::string>> saved_;
};

distributed::DistEnv env_from(const Variables& values) {
  const LauncherVariables variables(values);
  return distributed::read_env();
}

std::string env_error(const Variables& values) {
  const LauncherVariables variables(values);
  return error_of([] { distributed::read_env(); });
}

}  // namespace

TEST_SUITE("distributed") {
  TEST_CASE("2 ranks x batch 4 end with the weights and validation metrics of 1 process x batch 8") {
    check_two_ranks_equal_one_process(0);
  }

  TEST_CASE("a U-Net on 2 ranks over Gloo (SyncBatchNorm) ends as 1 process with BatchNorm on the same global batches") {
    check_two_ranks_equal_one_process(12, {"FASTCPP_WORKER_MODEL=unet"}, 1e-4, 1e-5);
  }

  TEST_CASE("a RetinaNet on 2 ranks over Gloo (SyncBatchNorm) ends as 1 process with BatchNorm, its AP50 gathered "
            "from ranks whose batches hold different numbers of boxes") {
    CHECK(check_two_ranks_equal_one_process(18, {"FASTCPP_WORKER_MODEL=retinanet"}, 1e-4, 1e-5) > 0);  // AP50
  }

  TEST_CASE("an MLP with a weight tied between two layers on 2 ranks ends with the weights of 1 process") {
    check_two_ranks_equal_one_process(58, {"FASTCPP_WORKER_MODEL=tied"});
  }

  TEST_CASE("the U-Net's 2 ranks started by fastcpp-launch and by torchrun end as 1 process") {
    const auto single_out = temp_path("unet_single");
    REQUIRE(wait_for(spawn_worker("single", single_out, {"FASTCPP_WORKER_MODEL=unet"}), 120) == 0);
    const auto base = temp_path("unet_launched");
    const std::string worker = std::string(FASTCPP_DIST_WORKER) + " ddp " + base, model = "FASTCPP_WORKER_MODEL=unet ";
    const std::vector<std::pair<std::string, std::string>> launchers{
        {"fastcpp-launch", model + FASTCPP_LAUNCH + " --nproc-per-node 2 --master-port " + std::to_string(free_port() + 13)},
        {"torchrun", model + FASTCPP_PYTHON + " -m torch.distributed.run --no_python --log_dir " + base +
                         "_logs --nproc_per_node 2 --master_port " + std::to_string(free_port() + 14)}};
    for (const auto& [name, launcher] : launchers) {
      CAPTURE(name);
      REQUIRE(run_command(launcher + " " + worker + " > " + base + ".log 2>&1") == 0);
      for (const auto& out : {base + ".0", base + ".1"}) check_same_params(out, single_out, 1e-4, 1e-5);
    }
    for (const auto& f : {single_out, base + ".0", base + ".1", base + ".log"}) std::filesystem::remove(f);
    std::filesystem::remove_all(base + "_logs");
  }

  TEST_CASE("fastcpp-launch refuses node settings that could not form a group, naming why") {
    const auto log = temp_path("launch_flags.log");
    auto refusal = [&](const std::string& flags) {
      const int status = run_command(std::string(FASTCPP_LAUNCH) + " --nproc-per-node 1 " + flags + " true 2> " + log);
      std::ifstream in(log);
      std::string line;
      std::getline(in, line);
      return std::to_string(status) + " " + line;
    };
    CHECK(refusal("--nnodes 0") ==
          "2 fastcpp-launch: --nnodes: Value 0 not in range 1 to 65536 (fastcpp-launch --help lists the flags)");
    CHECK(refusal("--nnodes 2 --node-rank 1") == "2 fastcpp-launch: --nnodes 2 needs --master-addr: the address of node 0");
    CHECK(refusal("--nnodes 2 --node-rank 2 --master-addr node0") ==
          "2 fastcpp-launch: --node-rank 2 is outside the 2 nodes of --nnodes");
    CHECK(refusal("--rdzv_endpoint :29400") == "2 fastcpp-launch: --rdzv-endpoint :29400 is not HOST:PORT");
    CHECK(refusal("--rdzv-endpoint node0:29x") ==
          "2 fastcpp-launch: --rdzv-endpoint node0:29x: the port is not in 1..65535");
    CHECK(refusal("--rdzv-endpoint ::1:29400") ==
          "2 fastcpp-launch: --rdzv-endpoint ::1:29400: an IPv6 address goes in brackets, [ADDRESS] or [ADDRESS]:PORT");
    CHECK(refusal("--rdzv-endpoint '[::1:29400'") ==
          "2 fastcpp-launch: --rdzv-endpoint [::1:29400: the ] that closes the IPv6 address is missing");
    CHECK(refusal("--nnodes 2 --node_rank 1 --rdzv_endpoint node0:29400 --no-such-flag") ==
          "2 fastcpp-launch: The following argument was not expected: --no-such-flag (fastcpp-launch --help lists the "
          "flags)");
    std::filesystem::remove(log);
  }

  TEST_CASE("fastcpp-launch's --rdzv-endpoint: an IPv6 address without its brackets, --master-port's port by default") {
    const auto out = temp_path("launch_endpoint");
    auto master = [&](const std::string& flags) {
      REQUIRE(run_command(std::string(FASTCPP_LAUNCH) + " --nproc-per-node 1 " + flags +
                          " sh -c 'echo \"$MASTER_ADDR $MASTER_PORT\"' > " + out) == 0);
      std::ifstream in(out);
      std::string line;
      std::getline(in, line);
      return line;
    };
    CHECK(master("--rdzv-endpoint '[::1]:29511'") == "::1 29511");
    CHECK(master("--rdzv-endpoint '[::1]'") == "::1 29500");
    CHECK(master("--rdzv_endpoint node0") == "node0 29500");
    CHECK(master("--rdzv-endpoint node0 --master-port 29512") == "node0 29512");
    CHECK(master("--master-port 29512 --rdzv-endpoint node0:29513") == "node0 29513");
    std::filesystem::remove(out);
  }

  TEST_CASE("fastcpp-launch on SIGINT, SIGTERM, SIGHUP or SIGQUIT stops its workers and exits with 128 + the signal") {
    const auto pids = temp_path("launch_signal_pids");
    for (const int signal : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
      CAPTURE(signal);
      std::filesystem::remove(pids);
      const pid_t launcher =
          spawn_launcher({"--nproc-per-node", "2", "sh", "-c", "echo $$ >> " + pids + "; exec sleep 60"});
      const auto workers = await_lines(pids, 2);
      REQUIRE(workers.size() == 2);
      ::kill(launcher, signal);
      CHECK(wait_for(launcher, 30) == 128 + signal);
      for (const auto& worker : workers) {
        CAPTURE(worker);
        const bool running = ::kill(std::stoi(worker), 0) == 0;
        CHECK_FALSE(running);
        if (running) ::kill(std::stoi(worker), SIGKILL);
      }
    }
    std::filesystem::remove(pids);
  }

  TEST_CASE("fastcpp-launch: what a worker started ends with it; a worker ignoring the stop signal is killed 30 s on") {
    // Worker 0, a script, runs a program in the background; worker 1 fails: both of worker 0's
    // processes are stopped (its process group), and nothing is left once the launcher ends.
    const auto background = temp_path("launch_background_pid");
    std::filesystem::remove(background);
    const pid_t failing = spawn_launcher(
        {"--nproc-per-node", "2", "sh", "-c",
         "if [ $LOCAL_RANK = 0 ]; then sleep 300 & echo $! > " + background + "; wait; else sleep 1; exit 3; fi"});
    CHECK(wait_for(failing, 30) == 3);
    const auto left = await_lines(background, 1);
    REQUIRE(left.size() == 1);
    const bool still_running = running(std::stoi(left[0]));
    CHECK_FALSE(still_running);
    if (still_running) ::kill(std::stoi(left[0]), SIGKILL);
    // A worker that ends leaves nothing behind either, at once, while the others run on.
    std::filesystem::remove(background);
    const pid_t ending = spawn_launcher(
        {"--nproc-per-node", "2", "sh", "-c",
         "if [ $LOCAL_RANK = 0 ]; then sleep 300 & echo $! > " + background + "; else sleep 6; fi"});
    const auto orphan = await_lines(background, 1);
    REQUIRE(orphan.size() == 1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(4);
    while (running(std::stoi(orphan[0])) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const bool orphan_running = running(std::stoi(orphan[0]));
    CHECK_FALSE(orphan_running);
    CHECK(running(ending));
    if (orphan_running) ::kill(std::stoi(orphan[0]), SIGKILL);
    CHECK(wait_for(ending, 30) == 0);
    // A worker that ignores SIGTERM (its checkpoint hangs, say) gets SIGKILL 30 s after it.
    const auto pids = temp_path("launch_stubborn_pid");
    std::filesystem::remove(pids);
    const pid_t launcher = spawn_launcher(
        {"--nproc-per-node", "1", "sh", "-c", "trap '' TERM; echo $$ > " + pids + "; while :; do sleep 1; done"});
    const auto worker = await_lines(pids, 1);
    REQUIRE(worker.size() == 1);
    const auto signalled = std::chrono::steady_clock::now();
    ::kill(launcher, SIGTERM);
    CHECK(wait_for(launcher, 60) == 128 + SIGTERM);
    CHECK(std::chrono::steady_clock::now() - signalled >= std::chrono::seconds(29));
    CHECK_FALSE(running(std::stoi(worker[0])));
    for (const auto& f : {background, pids}) std::filesystem::remove(f);
  }

  TEST_CASE("fastcpp-launch gives its workers torchrun's variables: one OpenMP thread each unless set, no agent store") {
    const auto out = temp_path("launch_variables");
    std::filesystem::remove(out);
    const auto launch = [&](const std::string& threads) {
      return run_command("env -u OMP_NUM_THREADS " + threads + " TORCHELASTIC_USE_AGENT_STORE=True " + FASTCPP_LAUNCH +
                         " --nproc-per-node 2 --max-restarts 3 sh -c 'echo $OMP_NUM_THREADS "
                         "$TORCHELASTIC_USE_AGENT_STORE $TORCHELASTIC_MAX_RESTARTS $GROUP_WORLD_SIZE >> " + out +
                         "' 2> /dev/null");
    };
    REQUIRE(launch("") == 0);
    CHECK(await_lines(out, 2) == std::vector<std::string>{"1 False 3 1", "1 False 3 1"});
    std::filesystem::remove(out);
    REQUIRE(launch("OMP_NUM_THREADS=4") == 0);  // a value set is kept
    CHECK(await_lines(out, 2) == std::vector<std::string>{"4 False 3 1", "4 False 3 1"});
    std::filesystem::remove(out);
  }

  TEST_CASE("fastcpp-launch signalled between a failed group and its restart starts no other group") {
    // Its stderr a full pipe, the launcher blocks in writing that it restarts the group,
    // after the first group ended and before the second starts: SIGTERM comes there.
    const auto starts = temp_path("launch_restart_starts");
    std::filesystem::remove(starts);
    int ends[2];
    REQUIRE(::pipe2(ends, O_CLOEXEC) == 0);
    ::fcntl(ends[1], F_SETFL, O_NONBLOCK);
    while (::write(ends[1], "x", 1) == 1) {
    }
    ::fcntl(ends[1], F_SETFL, 0);
    const pid_t launcher = spawn_launcher({"--nproc-per-node", "1", "--max-restarts", "1", "sh", "-c",
                                           "echo $TORCHELASTIC_RESTART_COUNT >> " + starts + "; exit 3"},
                                          ends[1]);
    ::close(ends[1]);
    REQUIRE(await_lines(starts, 1).size() == 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the launcher blocked in its write
    ::kill(launcher, SIGTERM);
    std::string errors;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (pollfd readable{ends[0], POLLIN, 0}; std::chrono::steady_clock::now() < deadline;) {
      if (::poll(&readable, 1, 100) <= 0) continue;
      char buffer[65536];
      const auto n = ::read(ends[0], buffer, sizeof buffer);
      if (n <= 0) break;  // every writer gone: the launcher and its workers
      errors.append(buffer, static_cast<size_t>(n));
    }
    ::close(ends[0]);
    CHECK(wait_for(launcher, 30) == 128 + SIGTERM);
    CHECK(await_lines(starts, 2, 0) == std::vector<std::string>{"0"});
    CHECK(errors.find("fastcpp-launch: worker 0 failed with exit code 3; restarting the group (1 of 1)") !=
          std::string::npos);
    std::filesystem::remove(starts);
  }

  TEST_CASE("fastcpp-launch: a worker killed mid-run restarts the group, which resumes and ends as an uninterrupted run") {
    const auto reference = run_two_ranks("ddp", 3);
    const auto base = temp_path("resume");
    const auto command = std::string(FASTCPP_LAUNCH) + " --nproc-per-node 2 --max-restarts 1 --master-port " +
                         std::to_string(free_port() + 4) + " " + FASTCPP_DIST_WORKER + " resume " + base + " 2> " +
                         base + ".log";
    CHECK(run_command(command) == 0);
    std::ifstream log(base + ".log");
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    CHECK(text.find("fastcpp-launch: worker 1 failed with exit code 137; restarting the group (1 of 1)") != std::string::npos);
    check_same_params(base + ".0", reference[0]);
    check_same_params(base + ".1", reference[0]);
    CHECK(read_result(base + ".0").get(2).toInt() == 1);  // the restarted group skipped epoch 0
    CHECK(!std::filesystem::exists(base + ".ckpt"));  // removed once the fit completed
    for (const auto& f : {base + ".0", base + ".1", base + ".log", reference[0], reference[1]}) std::filesystem::remove(f);
  }

  TEST_CASE("under torchrun (--no_python, --max_restarts 1) the same kill-restart-resume ends as an uninterrupted run") {
    const auto reference = run_two_ranks("ddp", 7);
    const auto base = temp_path("torchrun");
    const auto command = std::string(FASTCPP_PYTHON " -m torch.distributed.run --no_python --log_dir ") + base + "_logs --nproc_per_node 2 --max_restarts 1 --master_port " +
                         std::to_string(free_port() + 8) + " " + FASTCPP_DIST_WORKER + " resume " + base + " > " + base +
                         ".log 2>&1";
    CHECK(run_command(command) == 0);
    check_same_params(base + ".0", reference[0]);
    CHECK(read_result(base + ".1").get(2).toInt() == 1);
    for (const auto& f : {base + ".0", base + ".1", base + ".log", reference[0], reference[1]}) std::filesystem::remove(f);
    std::filesystem::remove_all(base + "_logs");
  }

  TEST_CASE("backend nccl with a CPU model is an error suggesting Gloo, before any rendezvous") {
    distributed::DistEnv env;
    env.world_size = 2;
    distributed::ProcessGroupOptions options;
    options.backend = "nccl";
    CHECK(error_of([&] { distributed::Communicator comm(env, options); }) ==
          "process group backend nccl needs a CUDA model, and this one is on cpu: use backend gloo "
          "(or auto, which picks Gloo for the CPU)");
    options.backend = "mpi";
    CHECK(error_of([&] { distributed::Communicator comm(env, options); }) ==
          "process group backend 'mpi' is unknown: use auto, gloo or nccl");
  }

  TEST_CASE("fastcpp-launch without restarts reports the failed worker") {
    const auto base = temp_path("norestart");
    const auto command = std::string(FASTCPP_LAUNCH) + " --nproc-per-node 2 --master-port " + std::to_string(free_port() + 5) +
                         " " + FASTCPP_DIST_WORKER + " resume " + base + " 2> " + base + ".log";
    CHECK(run_command(command) == 137);
    std::ifstream log(base + ".log");
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    CHECK(text.find("fastcpp-launch: worker 1 failed with exit code 137; no restarts left") != std::string::npos);
    for (const auto& f : {base + ".log", base + ".ckpt"}) std::filesystem::remove(f);
  }

  TEST_CASE("a world of 1 under a launcher all-reduces every batch, as PyTorch's DDP, and equals plain training") {
    const auto plain_out = temp_path("world1_plain"), ddp_out = temp_path("world1_ddp");
    REQUIRE(wait_for(spawn_worker("single_bs4", plain_out, {}), 120) == 0);
    REQUIRE(wait_for(spawn_worker("ddp", ddp_out, rank_env(0, 1, free_port() + 31)), 120) == 0);
    check_same_params(ddp_out + ".0", plain_out, 1e-6, 1e-6);
    CHECK(read_result(ddp_out + ".0").get(3).toInt() == 30);  // an all-reduce per training batch: 10 x 3 epochs
    std::filesystem::remove(ddp_out + ".0");
    std::filesystem::remove(plain_out);
  }

  TEST_CASE("with gradient accumulation (no_sync between steps) 2 ranks still equal 1 process") {
    const auto single_out = temp_path("acc_single");
    REQUIRE(wait_for(spawn_worker("single_acc", single_out, {}), 120) == 0);
    const auto outs = run_two_ranks("ddp_acc", 9);
    check_same_params(outs[0], single_out);
    check_same_params(outs[1], single_out);
    // 5 batches per epoch, a step every 2 (and at no epoch end): all-reduces only on stepping batches
    const auto reductions = read_result(outs[0]).get(3).toInt();
    CHECK(reductions == 7);  // 15 batches in 3 epochs, accumulating over 2: steps at batches 2,4,...,14
    for (const auto& f : {outs[0], outs[1], single_out}) std::filesystem::remove(f);
  }

  TEST_CASE("SyncBatchNorm on shards of 3 and 5 equals BatchNorm on the 8: output, gradients, running stats") {
    check_syncbn_equals_batchnorm(6);
  }

  TEST_CASE("SyncBatchNorm's channels-last path (its CUDA kernels' CPU twin) on shards of 3 and 5 over Gloo equals "
            "BatchNorm on the 8") {
    // The autograd function and the collectives the kernels run between, checked without a GPU.
    check_syncbn_equals_batchnorm(44, {"FASTCPP_SYNC_BN_KERNELS=twin", "FASTCPP_WORKER_CHANNELS_LAST=1"}, true);
    // Without the twin, the CPU's double sums take the same channels-last input.
    check_syncbn_equals_batchnorm(44, {"FASTCPP_WORKER_CHANNELS_LAST=1"}, false);
  }

  TEST_CASE("SyncBatchNorm's channels-last steps refuse, naming it, what the kernels would read out of range") {
    namespace cl = distributed::channels_last;
    const auto x = torch::randn({2, 4, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast);
    const auto gathered = cl::local_statistics(x, 1e-5).unsqueeze(0);
    const auto weight = torch::ones({4}), bias = torch::zeros({4});
    const std::string who = "SyncBatchNorm's channels-last kernels: ";
    CHECK(error_of([&] { cl::local_statistics(torch::randn({2, 4, 3, 3}), 1e-5); }) ==
          who + "the input [2, 4, 3, 3] with strides [36, 9, 3, 1] does not hold its channels innermost "
                "(channels-last, or [N, C])");
    CHECK(error_of([&] { cl::normalize(x, gathered.narrow(1, 0, 8), weight, bias, {}, {}, 0.1, 1e-5); }) ==
          who + "the gathered statistics must be [peers, 9] for the input's 4 channels, got [1, 8]");
    CHECK(error_of([&] { cl::normalize(x, gathered, torch::ones({3}), bias, {}, {}, 0.1, 1e-5); }) ==
          who + "the weight must be 4 contiguous fp32 values on cpu, as the input [2, 4, 3, 3] has 4 channels; "
                "got [3] Float on cpu");
    CHECK(error_of([&] { cl::normalize(x, gathered, weight, bias, torch::zeros({4}), {}, 0.1, 1e-5); }) ==
          who + "the running variance is missing");
    const auto n = cl::normalize(x, gathered, weight, bias, {}, {}, 0.1, 1e-5);
    const auto dy = torch::randn({2, 4, 3, 3});
    CHECK(error_of([&] { cl::grad_sums(dy, x, n.mean, n.invstd); }) ==
          who + "the output gradient [2, 4, 3, 3] Float on cpu is not laid out as the input [2, 4, 3, 3] Float on "
                "cpu (gradient_like_input makes it so)");
    const auto laid_out = cl::gradient_like_input(dy, x);
    CHECK(error_of([&] { cl::grad_sums(laid_out, x, n.mean.to(torch::kDouble), n.invstd); }) ==
          who + "the mean must be 4 contiguous fp32 values on cpu, as the input [2, 4, 3, 3] has 4 channels; got [4] "
                "Double on cpu");
    const auto sums = cl::grad_sums(laid_out, x, n.mean, n.invstd);
    CHECK(error_of([&] { cl::input_grad(laid_out, x, n.mean, n.invstd, weight, sums.grad_bias, n.count); }) ==
          who + "the summed gradient sums must be 8 contiguous fp32 values on cpu, as the input [2, 4, 3, 3] has 4 "
                "channels; got [4] Float on cpu");
  }

  TEST_CASE("the synced layers' kernel choice: the twin only where chosen and the input suits the kernels") {
    namespace cl = distributed::channels_last;
    distributed::SyncBatchNorm bn(4);
    const auto channels_last = torch::randn({2, 4, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast);
    CHECK(cl::kernel_choice() == cl::KernelChoice::automatic);
    CHECK_FALSE(cl::kernels_apply(*bn, channels_last));  // the CPU's double sums by default
    const KernelChoiceFor twin(cl::KernelChoice::cpu_twin);
    CHECK(cl::kernels_apply(*bn, channels_last));
    CHECK(cl::kernels_apply(*bn, torch::randn({5, 4})));                                 // [N, C]
    CHECK_FALSE(cl::kernels_apply(*bn, torch::randn({2, 4, 3, 3})));                     // channels outermost
    CHECK_FALSE(cl::kernels_apply(*bn, channels_last.to(torch::kDouble)));               // no fp64 kernels
    CHECK_FALSE(cl::kernels_apply(*bn, torch::randn({0, 4, 3, 3})));                     // no rows
    distributed::SyncBatchNorm half(4);
    half->to(torch::kHalf);  // a model made fp16 as a whole: its statistics are not fp32
    CHECK_FALSE(cl::kernels_apply(*half, channels_last.to(torch::kHalf)));
    const KernelChoiceFor aten(cl::KernelChoice::aten);
    CHECK_FALSE(cl::kernels_apply(*bn, channels_last));
  }

  TEST_CASE("SyncBatchNorm's synced arithmetic without a communicator equals BatchNorm on the batch") {
    check_synced_arithmetic_equals_batchnorm(torch::kFloat, at::MemoryFormat::Contiguous, 1e-5, 1e-6);
    check_synced_arithmetic_equals_batchnorm(torch::kFloat, at::MemoryFormat::ChannelsLast, 1e-5, 1e-6);
  }

  TEST_CASE("SyncBatchNorm's channels-last steps (the CUDA kernels' CPU twin) equal BatchNorm, as one peer and two") {
    for (const auto& shape : std::vector<std::vector<int64_t>>{{6, 8, 5, 3}, {5, 7, 3, 2}, {1, 3, 4, 4}, {9, 12}})
      check_channels_last_batchnorm(torch::TensorOptions(torch::kFloat), shape, 1e-5, 1e-5);
    check_channels_last_batchnorm(torch::TensorOptions(torch::kBFloat16), {6, 8, 5, 3}, 1e-2, 2e-2);
    // The output gradient as the backward hands it over: copied only where it is not laid
    // out as the input (channels innermost, the input's dtype).
    namespace cl = distributed::channels_last;
    const auto x = torch::randn({2, 8, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast);
    const auto same = torch::randn({2, 8, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast);
    CHECK(cl::gradient_like_input(same, x).is_same(same));
    const auto contiguous = torch::randn({2, 8, 3, 3}, torch::kDouble);
    const auto laid_out = cl::gradient_like_input(contiguous, x);
    CHECK(laid_out.strides() == x.strides());
    CHECK(laid_out.dtype() == x.dtype());
    CHECK(torch::equal(laid_out, contiguous.to(torch::kFloat)));
    // [N, C, L] with the channels innermost, a 3-d layout no memory format names.
    const auto sequence = torch::randn({2, 5, 6}).permute({0, 2, 1});
    CHECK(cl::gradient_like_input(torch::randn({2, 6, 5}), sequence).strides() == sequence.strides());
  }

#ifdef FASTCPP_HAS_CUDA
  TEST_CASE("SyncBatchNorm's CUDA kernels' tiling: 256 threads a block, every channel covered, the GPU kept busy") {
    namespace cl = distributed::channels_last;
    // ResNet-50's first BatchNorm at batch 128 in fp16 on an H100's 132 multiprocessors.
    auto t = cl::tiling({128 * 112 * 112, 64, 8}, 132);
    CHECK(t.block_x == 8);
    CHECK(t.block_y == 32);
    CHECK(t.grid_x == 1);
    CHECK(t.reduce_grid_y == 528);  // 4 blocks a multiprocessor: each thread reads 95 rows
    CHECK(t.elementwise_grid_y == 1056);
    // Its last ones: 2048 channels over 7x7 maps.
    t = cl::tiling({128 * 7 * 7, 2048, 8}, 132);
    CHECK(t.block_x == 32);
    CHECK(t.grid_x == 8);
    CHECK(t.reduce_grid_y == 49);  // 16 rows a thread
    CHECK(t.elementwise_grid_y == 132);
    CHECK(cl::partials_size({128 * 7 * 7, 2048, 8}, t) == 49 * (2 * 2048 + 1));
    // Odd channels, one at a time; a single row.
    t = cl::tiling({10, 7, 1}, 132);
    CHECK(t.block_x == 8);
    CHECK(t.block_y == 32);
    CHECK(t.grid_x == 1);
    CHECK(t.reduce_grid_y == 1);
    CHECK(t.elementwise_grid_y == 1);
    for (const auto& shape : std::vector<cl::Shape>{{1, 1, 1}, {3, 300, 4}, {1 << 20, 1000, 8}, {1 << 24, 3, 1}}) {
      CAPTURE(shape.channels);
      t = cl::tiling(shape, 132);
      CHECK(t.block_x * t.block_y == 256);
      CHECK(static_cast<int64_t>(t.grid_x) * t.block_x * shape.pack >= shape.channels);
      CHECK(t.reduce_grid_y >= 1);
      CHECK(t.reduce_grid_y <= 1024);
      CHECK(t.elementwise_grid_y >= 1);
      CHECK(t.elementwise_grid_y <= 65535);
    }
  }
#endif

  TEST_CASE("SyncBatchNorm's forward_relu equals relu(BatchNorm + residual), its fused channels-last CPU kernel included") {
    struct Case {
      std::vector<int64_t> shape;
      bool residual;
    };
    // Small maps (one span of rows), a map of 1x1 (channels-last and contiguous at once), and
    // maps large enough to be cut into a span per thread.
    for (const auto& [shape, with_residual] : std::vector<Case>{{{4, 16, 5, 7}, true},
                                                               {{3, 8, 1, 9}, false},
                                                               {{6, 24, 1, 1}, true},
                                                               {{8, 64, 12, 12}, true},
                                                               {{16, 32, 14, 14}, false}}) {
      for (const bool channels_last : {true, false}) {
        for (const bool training : {true, false}) {
          CAPTURE(shape);
          CAPTURE(channels_last);
          CAPTURE(training);
          torch::manual_seed(0);
          distributed::SyncBatchNorm bn(shape[1]);
          torch::nn::BatchNorm2d reference(shape[1]);
          {
            torch::NoGradGuard no_grad;
            for (auto* layer : std::vector<torch::nn::Module*>{bn.get(), reference.get()}) {
              torch::manual_seed(1);  // the same values in both layers
              for (auto& t : layer->parameters()) t.normal_();
              layer->named_buffers()["running_mean"].normal_();
              layer->named_buffers()["running_var"].uniform_(0.5, 2);
            }
          }
          bn->train(training);
          reference->train(training);
          const auto format = channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
          // An offset mean, as after a convolution, and a gradient of the output's shape.
          const auto input = (torch::randn(shape) * 3 + 5).contiguous(format);
          const auto shortcut = with_residual ? torch::randn(shape).contiguous(format) : torch::Tensor();
          const auto dy = torch::randn(shape).contiguous(torch::MemoryFormat::ChannelsLast);
          auto x = input.clone().requires_grad_(true), reference_x = input.clone().requires_grad_(true);
          auto residual = with_residual ? shortcut.clone().requires_grad_(true) : torch::Tensor();
          auto reference_residual = with_residual ? shortcut.clone().requires_grad_(true) : torch::Tensor();

          OperatorCount count;
          count.start();
          const auto y = bn->forward_relu(x, residual);
          y.backward(dy);
          const auto calls = count.stop();
          // In training, channels-last (a 1x1 map is that too) takes the fused kernel: none of
          // ATen's BatchNorm or ReLU. In evaluation with gradients it cannot (it has no backward).
          const bool fused = training && (channels_last || shape[2] * shape[3] == 1);
          CHECK((calls.count("aten::native_batch_norm") == 0) == fused);
          CHECK((calls.count("aten::threshold_backward") == 0) == fused);
          if (!training) {  // without gradients it does, and gives the same output
            torch::NoGradGuard no_grad;
            OperatorCount inference_count;
            inference_count.start();
            const auto inferred = bn->forward_relu(input, shortcut);
            CHECK((inference_count.stop().count("aten::native_batch_norm") == 0) ==
                  (channels_last || shape[2] * shape[3] == 1));
            CHECK(torch::allclose(inferred, y, 1e-5, 1e-5));
          }

          auto z = reference(reference_x);
          const auto expected = torch::relu(with_residual ? z + reference_residual : z);
          expected.backward(dy);
          CHECK(y.is_contiguous(x.suggest_memory_format()));
          CHECK(torch::allclose(y, expected, 1e-5, 1e-5));
          CHECK(torch::allclose(x.grad(), reference_x.grad(), 1e-4, 1e-5));
          if (with_residual) CHECK(torch::equal(residual.grad(), reference_residual.grad()));
          CHECK(torch::allclose(bn->weight.grad(), reference->weight.grad(), 1e-4, 1e-4));
          CHECK(torch::allclose(bn->bias.grad(), reference->bias.grad(), 1e-4, 1e-4));
          CHECK(torch::allclose(bn->running_mean, reference->running_mean, 1e-6, 1e-6));
          CHECK(torch::allclose(bn->running_var, reference->running_var, 1e-6, 1e-6));
          CHECK(bn->num_batches_tracked.item<int64_t>() == reference->num_batches_tracked.item<int64_t>());
        }
      }
    }
    // A batch of one value per channel: BatchNorm's error, before the running statistics
    // take a NaN variance (ATen's batch_norm would give them one without a word).
    distributed::SyncBatchNorm bn(3);
    const auto one_value = [](const std::string& sizes) {
      return "SyncBatchNorm: expected more than 1 value per channel when training, got input size " + sizes +
             "; train on batches of 2 or more (drop_last drops a last batch of 1)";
    };
    CHECK(error_of([&] {
            bn->forward_relu(torch::randn({1, 3, 1, 1}).contiguous(torch::MemoryFormat::ChannelsLast));
          }) == one_value("[1, 3, 1, 1]"));
    CHECK(error_of([&] { bn->forward(torch::randn({1, 3})); }) == one_value("[1, 3]"));
    CHECK(torch::equal(bn->running_var, torch::ones({3})));
    CHECK(bn->num_batches_tracked.item<int64_t>() == 0);
    bn->eval();
    CHECK(bn->forward(torch::randn({1, 3})).sizes() == torch::IntArrayRef{1, 3});  // evaluation uses the running ones
    // Synchronized, it is the values of all the processes' batches that count.
    auto mean = torch::zeros({3}), var = torch::ones({3});
    const auto summed = torch::tensor({1.0, 2.0, 3.0, 1.0, 4.0, 9.0, 1.0}, torch::kDouble);  // sums, squares, count
    CHECK(error_of([&] { distributed::batchnorm::normalization(summed, 3, 1e-5, 0.1, mean, var); }) ==
          "SyncBatchNorm: expected more than 1 value per channel when training, got 1 over all the synchronized "
          "batches; train on batches of 2 or more");
    CHECK(torch::equal(var, torch::ones({3})));
  }

  TEST_CASE("BatchNorm layers that cannot be swapped are named") {
    struct BlockImpl : torch::nn::Module {
      BlockImpl() { bn = register_module("bn", torch::nn::BatchNorm2d(4)); }
      torch::Tensor forward(const torch::Tensor& x) { return bn(x); }
      torch::nn::BatchNorm2d bn{nullptr};
    };
    TORCH_MODULE(Block);
    torch::nn::Sequential model(torch::nn::BatchNorm2d(4), Block(), torch::nn::ReLU());
    CHECK(distributed::unconvertible_batchnorms(*model) == std::vector<std::string>{"1.bn"});
    auto converted = distributed::convert_sync_batchnorm(model, nullptr);
    CHECK(std::dynamic_pointer_cast<distributed::SyncBatchNormImpl>(converted->ptr(0)) != nullptr);
    CHECK(converted->ptr(0)->parameters()[0].is_same(model->ptr(0)->parameters()[0]));  // shared, not copied
  }

  TEST_CASE("a frozen BatchNorm stays frozen as a SyncBatchNorm, a trained one trains") {
    torch::nn::Sequential model(torch::nn::BatchNorm2d(4), torch::nn::BatchNorm2d(4));
    for (auto& p : model->ptr(0)->parameters()) p.set_requires_grad(false);  // a frozen group, train_bn off
    auto converted = distributed::convert_sync_batchnorm(model, nullptr);
    for (const auto& p : converted->ptr(0)->parameters()) CHECK_FALSE(p.requires_grad());
    for (const auto& p : converted->ptr(1)->parameters()) CHECK(p.requires_grad());
    for (const auto& p : distributed::SyncBatchNorm(4)->parameters()) CHECK(p.requires_grad());
  }

  TEST_CASE("BatchNorm layers whose settings SyncBatchNorm would change are named, not converted") {
    torch::nn::Sequential model(torch::nn::BatchNorm2d(torch::nn::BatchNorm2dOptions(4).affine(false)),
                                torch::nn::BatchNorm2d(4),
                                torch::nn::BatchNorm1d(torch::nn::BatchNorm1dOptions(4).track_running_stats(false)),
                                torch::nn::BatchNorm1d(torch::nn::BatchNorm1dOptions(4).momentum(std::nullopt)));
    CHECK(error_of([&] { distributed::check_batchnorms_convertible(*model, "to_parallel", "replica"); }) ==
          "to_parallel(sync_bn): SyncBatchNorm would not keep these BatchNorm layers' settings: 0 (affine=false), 2 "
          "(track_running_stats=false), 3 (momentum=none (a cumulative average)). Build them with affine weights, "
          "running statistics and a momentum, or pass sync_bn = false to keep per-replica statistics");
    CHECK_NOTHROW(distributed::check_batchnorms_convertible(*torch::nn::Sequential(torch::nn::BatchNorm2d(4)), "to_parallel", "replica"));
  }

  TEST_CASE("without sync_bn, every rank validates and ends with rank 0's BatchNorm statistics") {
    const auto outs = run_two_ranks("ddp_local_bn", 15);
    const auto a = read_result(outs[0]).get(4).toTensorList(), b = read_result(outs[1]).get(4).toTensorList();
    REQUIRE(a.size() == 3);  // running_mean, running_var, num_batches_tracked
    for (size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a.get(i), b.get(i)));
    check_same_params(outs[0], outs[1]);
    for (const auto& out : outs) std::filesystem::remove(out);
  }

  TEST_CASE("a parameter no rank uses keeps no gradient: 2 ranks end with 1 process's weights (Adam's weight decay), "
            "with gradient accumulation too") {
    for (const auto& [single_mode, mode, port] :
         std::vector<std::tuple<std::string, std::string, int>>{{"single_unused", "unused", 1},
                                                                {"single_unused_acc", "unused_acc", 46}}) {
      CAPTURE(mode);
      const auto single = temp_path(single_mode);
      REQUIRE(wait_for(spawn_worker(single_mode, single, {}), 120) == 0);
      for (const auto& out : run_two_ranks(mode, port)) {
        check_same_params(out, single, 1e-5, kAdamAtol);
        std::filesystem::remove(out);
      }
      std::filesystem::remove(single);
    }
  }

  TEST_CASE("parameters frozen and unfrozen between batches, inside accumulation windows and between a forward and its "
            "backward: 2 ranks end with 1 process's weights") {
    for (const auto& [plain_mode, single_mode, mode, port, reductions] :
         std::vector<std::tuple<std::string, std::string, std::string, int, int>>{
             {"single", "single_unfreeze", "unfreeze", 51, 15},
             {"single_acc", "single_unfreeze_acc", "unfreeze_acc", 52, 7},
             // a parameter no rank uses stays without a gradient across the rebuilds
             {"single_unused_acc", "single_unused_unfreeze_acc", "unused_unfreeze_acc", 56, 7},
             // changed between a batch's forward and its backward: that backward gives an unfrozen
             // parameter no gradient, a frozen one none either
             {"single", "single_unfreeze_between", "unfreeze_between", 57, 15},
             {"single_acc", "single_unfreeze_between_acc", "unfreeze_between_acc", 58, 7}}) {
      CAPTURE(mode);
      const auto single = temp_path(single_mode), plain = temp_path(plain_mode);
      REQUIRE(wait_for(spawn_worker(single_mode, single, {}), 120) == 0);
      REQUIRE(wait_for(spawn_worker(plain_mode, plain, {}), 120) == 0);
      const auto frozen = read_result(single).get(0).toTensorList(), trained = read_result(plain).get(0).toTensorList();
      CHECK(!torch::equal(frozen.get(0), trained.get(0)));  // the freezing changed the run
      for (const auto& out : run_two_ranks(mode, port)) {
        check_same_params(out, single, 1e-5, mode.find("unused") != std::string::npos ? kAdamAtol : 1e-6);
        CHECK(read_result(out).get(3).toInt() == reductions);  // every step all-reduced, across rebuilt buckets
        std::filesystem::remove(out);
      }
      std::filesystem::remove(single);
      std::filesystem::remove(plain);
    }
  }

  TEST_CASE("an unreachable master is an error naming the address within the timeout") {
    const auto env = env_of(1, 2, free_port() + 2);
    const auto start = std::chrono::steady_clock::now();
    const auto message = error_of([&] {
      distributed::Communicator comm(env, {.rendezvous_timeout = std::chrono::seconds(2)});
    });
    CHECK(message.rfind("rank 1 of 2: cannot rendezvous at the master 127.0.0.1:" + std::to_string(env.master_port) +
                            " within 2 s",
                        0) == 0);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(15));
  }

  TEST_CASE("the ranks' validation batches gathered: targets padded to the largest; predictions of other shapes an "
            "Error on both ranks") {
    const int port = free_port() + 73;
    std::array<torch::Tensor, 2> targets;
    std::array<std::string, 2> dims;
    const auto shapes = in_two_threads([&](int r) {
      distributed::Communicator comm(env_of(r, 2, port), {.rendezvous_timeout = std::chrono::seconds(20)});
      targets[r] = distributed::gather_padded(comm, torch::full({2, r == 0 ? 3 : 1, 5}, double(r)));
      const auto pred = r == 0 ? torch::zeros({4, 3}) : torch::zeros({4, 3, 1});
      dims[r] = any_error_of([&] { distributed::gather_same_shape(comm, pred); });
      distributed::gather_same_shape(comm, torch::zeros({4, r == 0 ? 3 : 2}));
    });
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      CHECK(shapes[r] == "to_distributed: the ranks' validation predictions differ in shape ([4, 3] on rank 0, [4, 2] "
                         "on rank 1); give the validation items one size (a Resize) to gather them");
      CHECK(dims[r] == "to_distributed: the ranks' validation predictions differ in their number of dimensions "
                       "([2, 3], rank by rank)");
      REQUIRE(targets[r].sizes() == torch::IntArrayRef{2, 2, 3, 5});
      CHECK(torch::equal(targets[r][0], torch::zeros({2, 3, 5})));
      CHECK(torch::equal(targets[r][1].narrow(1, 0, 1), torch::ones({2, 1, 5})));
      CHECK(torch::equal(targets[r][1].narrow(1, 1, 2), torch::full({2, 2, 5}, -1.0)));  // box_targets' padding
    }
  }

  TEST_CASE("processes started with different WORLD_SIZE values both stop with the same explanation") {
    const int port = free_port() + 3;
    const distributed::ProcessGroupOptions options{.rendezvous_timeout = std::chrono::seconds(10)};
    const auto messages =
        in_two_threads([&](int r) { distributed::Communicator(env_of(r, r == 0 ? 2 : 3, port), options); });
    CHECK(messages[0] == "WORLD_SIZE differs between processes: rank 0 has 2, rank 1 has 3; start every process with the same WORLD_SIZE");
    CHECK(messages[1] == "WORLD_SIZE differs between processes: rank 1 has 3, rank 0 has 2; start every process with the same WORLD_SIZE");
  }

  TEST_CASE("a rank 0 started with the larger WORLD_SIZE stops at once too, and so does its peer") {
    // The store must not wait for rank 0's 3 processes to connect before the sizes are compared.
    const int port = free_port() + 60;
    const distributed::ProcessGroupOptions options{.rendezvous_timeout = std::chrono::seconds(10)};
    const auto start = std::chrono::steady_clock::now();
    const auto messages =
        in_two_threads([&](int r) { distributed::Communicator(env_of(r, r == 0 ? 3 : 2, port), options); });
    CHECK(messages[0] ==
          "WORLD_SIZE differs between processes: rank 0 has 3, rank 1 has 2; start every process with the same "
          "WORLD_SIZE");
    CHECK(messages[1] ==
          "WORLD_SIZE differs between processes: rank 1 has 2, rank 0 has 3; start every process with the same "
          "WORLD_SIZE");
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(6));
  }

  TEST_CASE("a WORLD_SIZE that never comes is an error naming the rank and WORLD_SIZE, not the store's own") {
    const distributed::ProcessGroupOptions options{.rendezvous_timeout = std::chrono::seconds(2)};
    // Rank 0 of 2, alone.
    const int port = free_port() + 61;
    const auto alone = any_error_of([&] { distributed::Communicator(env_of(0, 2, port), options); });
    CHECK_MESSAGE(alone.starts_with("rank 0 of 2: rank 1 did not post its WORLD_SIZE at the master 127.0.0.1:" +
                                    std::to_string(port) + " ("),
                  alone);
    CHECK_MESSAGE(alone.ends_with("); start all 2 processes, each with the same WORLD_SIZE"), alone);
    // Rank 1 at a store where no rank 0 posts.
    const int other_port = free_port() + 62;
    c10d::TCPStoreOptions server;
    server.port = static_cast<std::uint16_t>(other_port);
    server.isServer = true;
    server.waitWorkers = false;
    c10d::TCPStore store("127.0.0.1", server);
    const auto waiting = any_error_of([&] { distributed::Communicator(env_of(1, 2, other_port), options); });
    CHECK_MESSAGE(waiting.starts_with("rank 1 of 2: rank 0 did not post its WORLD_SIZE at the master 127.0.0.1:" +
                                      std::to_string(other_port) + " ("),
                  waiting);
    CHECK_MESSAGE(waiting.ends_with("); check that rank 0 runs and that every process has the same WORLD_SIZE"),
                  waiting);
  }

  TEST_CASE("under torchrun's agent store, ranks on nodes that counted different restarts still form a group, attempt "
            "after attempt") {
    // The agent's store outlives the workers: from the second attempt on, the earlier ones' keys are there.
    const int port = free_port() + 63;
    c10d::TCPStoreOptions server;
    server.port = static_cast<std::uint16_t>(port);
    server.isServer = true;
    server.waitWorkers = false;
    c10d::TCPStore agent_store("127.0.0.1", server);
    // TORCHELASTIC_RESTART_COUNT of rank 0's node and of rank 1's: each agent counts its own restarts.
    for (const auto& counts : std::vector<std::pair<int, int>>{{0, 0}, {1, 0}, {1, 0}}) {
      const int count0 = counts.first, count1 = counts.second;
      CAPTURE(count0);
      CAPTURE(count1);
      float sums[2] = {0, 0};
      const auto errors = in_two_threads([&](int r) {
        auto env = env_of(r, 2, port);
        env.agent_store = true;
        env.restart_count = r == 0 ? count0 : count1;
        distributed::Communicator comm(env, {.rendezvous_timeout = std::chrono::seconds(10)});
        auto value = torch::full({1}, static_cast<float>(r + 1));
        comm.all_reduce_sum(value);
        sums[r] = value.item<float>();
      });
      CHECK(errors[0] == "(nothing thrown)");
      CHECK(errors[1] == "(nothing thrown)");
      CHECK(sums[0] == 3);
      CHECK(sums[1] == 3);
    }
    CHECK(agent_store.add("fastcpp/attempts", 0) == 3);  // rank 0 numbered each attempt in the store
  }

  TEST_CASE("a rank restarted while the failed group's rank 0 still serves its store joins the next rank 0's group") {
    const int port = free_port() + 68;
    const distributed::ProcessGroupOptions options{.rendezvous_timeout = std::chrono::seconds(20)};
    std::array<std::unique_ptr<distributed::Communicator>, 2> old;
    const auto formed = in_two_threads(
        [&](int r) { old[r] = std::make_unique<distributed::Communicator>(env_of(r, 2, port), options); });
    REQUIRE(formed[0] == "(nothing thrown)");
    REQUIRE(formed[1] == "(nothing thrown)");
    // Rank 1 fails and is started again at once; rank 0 has not noticed yet, and goes 2 s later.
    old[1].reset();
    float restarted_sum = 0;
    std::atomic<bool> restarted_formed{false};
    std::string restarted_error = "(nothing thrown)";
    std::thread restarted([&] {
      restarted_error = any_error_of([&] {
        distributed::Communicator comm(env_of(1, 2, port), options);
        restarted_formed = true;
        auto value = torch::full({1}, 2.f);
        comm.all_reduce_sum(value);
        restarted_sum = value.item<float>();
      });
    });
    std::this_thread::sleep_for(std::chrono::seconds(2));
    // The old store is still there, marked, and the restarted rank waits rather than joining it.
    c10d::TCPStoreOptions client;
    client.port = static_cast<std::uint16_t>(port);
    client.timeout = std::chrono::seconds(5);
    const bool old_store_marked = c10d::TCPStore("127.0.0.1", client).check({distributed::kFormedKey});
    const bool formed_before_rank0 = restarted_formed;
    float sum = 0;
    const auto rank0_error = any_error_of([&] {
      old[0].reset();
      distributed::Communicator rank0(env_of(0, 2, port), options);
      auto value = torch::full({1}, 1.f);
      rank0.all_reduce_sum(value);
      sum = value.item<float>();
    });
    restarted.join();
    CHECK(old_store_marked);
    CHECK_FALSE(formed_before_rank0);
    CHECK(rank0_error == "(nothing thrown)");
    CHECK(restarted_error == "(nothing thrown)");
    CHECK(restarted_sum == 3);
    CHECK(sum == 3);
  }

  TEST_CASE("joining a forming group: past a marked store that closes to the next, which keeps the whole timeout") {
    using namespace std::chrono_literals;
    const int port = free_port() + 69;
    const std::string where = "127.0.0.1:" + std::to_string(port);
    c10d::TCPStoreOptions server;
    server.port = static_cast<std::uint16_t>(port);
    server.isServer = true;
    server.waitWorkers = false;
    server.timeout = 10s;
    auto old = std::make_unique<c10d::TCPStore>("127.0.0.1", server);
    old->set(distributed::kFormedKey, {1});
    std::unique_ptr<c10d::TCPStore> next;
    std::thread successor([&] {
      std::this_thread::sleep_for(1s);
      old.reset();
      std::this_thread::sleep_for(500ms);  // no store at the port for a while
      next = std::make_unique<c10d::TCPStore>("127.0.0.1", server);
    });
    c10d::TCPStoreOptions client;
    client.port = static_cast<std::uint16_t>(port);
    client.timeout = 8s;
    const auto start = std::chrono::steady_clock::now();
    c10::intrusive_ptr<c10d::Store> store;
    const auto error =
        any_error_of([&] { store = distributed::connect_to_forming_group("127.0.0.1", client, "rank 1 of 2", where); });
    const auto waited = std::chrono::steady_clock::now() - start;
    successor.join();
    CHECK(error == "(nothing thrown)");
    REQUIRE(store);
    CHECK(waited >= 1500ms);
    CHECK_FALSE(store->check({distributed::kFormedKey}));
    CHECK(store->getTimeout() == 8s);  // not the second or so left when it connected

    // Never replaced: an error once the timeout has passed.
    next->set(distributed::kFormedKey, {1});
    client.timeout = 1s;
    CHECK(error_of([&] { distributed::connect_to_forming_group("127.0.0.1", client, "rank 1 of 2", where); }) ==
          "rank 1 of 2: the store at " + where + " is that of a group formed before this process started, and no new "
          "rank 0 replaced it within 1 s; stop that group's processes, or give this run another MASTER_PORT");
  }

  TEST_CASE("ranks whose loaders serve other epochs (a seed per rank) get one error each, before any batch") {
    const auto base = temp_path("seed_by_rank");
    std::vector<pid_t> pids;
    for (int rank = 0; rank < 2; ++rank) {
      const auto log = base + ".log" + std::to_string(rank);
      pids.push_back(spawn_worker("seed_by_rank", base, rank_env(rank, 2, free_port() + 75), log));
    }
    for (auto pid : pids) CHECK(wait_for(pid, 120) == 1);
    for (int rank = 0; rank < 2; ++rank) {
      std::ifstream in(base + ".log" + std::to_string(rank));
      const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      CHECK(output == "dist_worker seed_by_rank: Exception occurred in `DistributedTrainer` when calling event "
                      "`before_fit`:\n\tto_distributed: rank 1's training loader serves its 40 items in another "
                      "order than rank 0's: every rank needs the same data and the same seed (the ranks share out one "
                      "epoch)\n");
      std::filesystem::remove(base + ".log" + std::to_string(rank));
    }
  }

  TEST_CASE("a checkpoint rank 0 cannot write stops every rank after the save's barrier, each with its error") {
    const auto base = temp_path("failed_save");
    std::ofstream(base + ".file") << "x";  // where the checkpoints' folder would go
    std::vector<pid_t> pids;
    for (int rank = 0; rank < 2; ++rank) {
      const auto log = base + ".log" + std::to_string(rank);
      pids.push_back(spawn_worker("failed_save", base, rank_env(rank, 2, free_port() + 77), log));
    }
    for (auto pid : pids) CHECK(wait_for(pid, 120) == 1);
    const auto log = [&](int rank) {
      std::ifstream in(base + ".log" + std::to_string(rank));
      return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    };
    const std::string event =
        "dist_worker failed_save: Exception occurred in `SaveModel` when calling event `after_epoch`:\n\t";
    CHECK(log(0) == event + "cannot write checkpoint '" + base + ".file/model_0.pt': cannot make its folder '" + base +
                        ".file': Not a directory\n");
    CHECK(log(1) == event + "rank 0 could not write its file (its own error says why): rank 1 stops with it\n");
    for (const auto* suffix : {".file", ".log0", ".log1"}) std::filesystem::remove(base + suffix);
  }

  TEST_CASE("a rank that dies while the other waits in a collective: an error on the survivor, not a hang") {
    const auto base = temp_path("dies"), log = base + ".log";
    // `resume` mode's rank 1 kills itself after epoch 0 of a first attempt; no launcher restarts it.
    auto env = [&](int rank) {
      auto vars = rank_env(rank, 2, free_port() + 4);
      vars.push_back("TORCHELASTIC_RESTART_COUNT=0");
      return vars;
    };
    const auto start = std::chrono::steady_clock::now();
    const pid_t rank0 = spawn_worker("resume", base, env(0), log), rank1 = spawn_worker("resume", base, env(1));
    CHECK(wait_for(rank1, 120) == 128 + SIGKILL);
    CHECK(wait_for(rank0, 120) == 1);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(60));  // the group's timeout, at most
    std::ifstream in(log);
    const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto expected = "failed on rank 0 (host " + distributed::host_name() + "): lost rank 1 (host " + distributed::host_name() + ", 127.0.0.1): ";
    CHECK_MESSAGE(output.find(expected) != std::string::npos, output);
    for (const auto* suffix : {".log", ".ckpt", ".0", ".1"}) std::filesystem::remove(base + suffix);
  }

  TEST_CASE("once a process group forms, a write to a lost peer's socket is an error, not a silent SIGPIPE death") {
    const auto write_to_closed_socket = [] {
      int ends[2];
      REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, ends) == 0);
      close(ends[1]);
      errno = 0;
      const auto written = write(ends[0], "x", 1);
      const int error = errno;
      close(ends[0]);
      return written == -1 ? error : 0;
    };
    struct sigaction saved {}, plain {};
    plain.sa_handler = SIG_DFL;
    REQUIRE(sigaction(SIGPIPE, &plain, &saved) == 0);
    { distributed::Communicator comm(env_of(0, 1, free_port() + 49)); }
    CHECK(write_to_closed_socket() == EPIPE);  // with SIGPIPE's default action the test would have died here

    static std::atomic<int> handled{0};
    struct sigaction own {};
    own.sa_handler = [](int) { handled = 1; };
    REQUIRE(sigaction(SIGPIPE, &own, nullptr) == 0);
    { distributed::Communicator comm(env_of(0, 1, free_port() + 50)); }
    CHECK(write_to_closed_socket() == EPIPE);
    CHECK(handled == 1);  // the program's own handler is kept
    sigaction(SIGPIPE, &saved, nullptr);
  }

  TEST_CASE("rank0_first: rank 0 runs first, the others after it is done, however longer than the collectives' timeout it takes") {
    const auto base = temp_path("rank0_first");
    std::filesystem::remove(base);
    run_two_ranks("rank0_first", 5);
    std::ifstream in(base);
    const std::string order((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(order == "0\n1\n");
    std::filesystem::remove(base);
  }

  TEST_CASE("the local rank a launcher gives picks the process's GPU from the start") {
    auto with = [](const char* name, const char* value) {
      ::setenv(name, value, 1);
      const auto rank = launcher_local_rank();
      ::unsetenv(name);
      return rank;
    };
    CHECK(!launcher_local_rank());
    CHECK(with("LOCAL_RANK", "3") == 3);
    CHECK(with("SLURM_LOCALID", "1") == 1);
    CHECK(with("OMPI_COMM_WORLD_LOCAL_RANK", "2") == 2);
    CHECK(!with("LOCAL_RANK", "x"));
    ::setenv("SLURM_LOCALID", "0", 1);  // mpirun's daemon's, in an allocation
    CHECK(with("OMPI_COMM_WORLD_LOCAL_RANK", "2") == 2);
    ::unsetenv("SLURM_LOCALID");
  }

  TEST_CASE("DDP's gradients are views into its buckets, laid out as the params: nothing is copied per parameter") {
    auto comm = std::make_shared<distributed::Communicator>(env_of(0, 1, free_port() + 41));
    torch::manual_seed(0);
    torch::nn::Sequential model(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3)), torch::nn::Flatten(),
                                torch::nn::Linear(64, 5));
    auto plain = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone());
    const auto params = model->parameters(), plain_params = plain->parameters();
    {
      torch::NoGradGuard no_grad;  // the conv weights channels-last, as to_channels_last leaves them
      for (auto p : {params[0], plain_params[0]}) p.set_data(p.contiguous(torch::MemoryFormat::ChannelsLast));
    }
    distributed::Reducer reducer(params, comm, {.bucket_bytes = 100, .first_bucket_bytes = 10});
    REQUIRE(reducer.n_buckets() == 3);
    const auto x = torch::randn({2, 3, 6, 6}).contiguous(torch::MemoryFormat::ChannelsLast);
    OperatorCount count;
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      count.start();
      reduced_backward(reducer, *model, [&] { return model->forward(x).square().sum(); });
      auto copies = count.stop()["aten::copy_"];
      count.start();
      plain->zero_grad();
      plain->forward(x).square().sum().backward();
      CHECK(copies == count.stop()["aten::copy_"]);  // the model's own copies, none more
      for (size_t k = 0; k < params.size(); ++k) {
        CAPTURE(k);
        CHECK(torch::allclose(params[k].grad(), plain_params[k].grad(), 1e-6, 1e-7));
        CHECK(params[k].grad().strides() == params[k].strides());  // the conv weight's channels-last
      }
      for (const auto& bucket : reducer.bucket_params())
        for (size_t k : bucket) CHECK(params[k].grad().is_alias_of(params[bucket.front()].grad()));
    }
    CHECK(reducer.reductions() == 3);
  }

  TEST_CASE("a Reducer takes its hooks off the parameters when it goes: rebuilt ones do not pile up") {
    auto comm = std::make_shared<distributed::Communicator>(env_of(0, 1, free_port() + 53));
    torch::nn::Linear layer(3, 2);
    // Held, as a fit's autograd graph holds it across a rebuild (unheld, it would be made anew).
    const auto accumulator = torch::autograd::impl::grad_accumulator(layer->weight);
    const auto hooks = [&] { return accumulator->post_hooks().size(); };
    const auto before = hooks();
    for (int rebuild = 0; rebuild < 3; ++rebuild) {
      distributed::Reducer reducer(layer->parameters(), comm);
      CHECK(hooks() == before + 1);
    }
    CHECK(hooks() == before);
  }

  TEST_CASE("DDP's gradient slots start at 16 bytes, whatever the sizes before them") {
    auto comm = std::make_shared<distributed::Communicator>(env_of(0, 1, free_port() + 48));
    torch::nn::Sequential model(torch::nn::Linear(3, 5), torch::nn::Linear(5, 2));  // 15, 5, 10 and 2 values
    distributed::Reducer reducer(model->parameters(), comm);
    REQUIRE(reducer.n_buckets() == 1);
    reducer.prepare();
    for (const auto& param : model->parameters()) {
      CHECK(param.grad().is_alias_of(model->parameters().front().grad()));
      CHECK(reinterpret_cast<uintptr_t>(param.grad().data_ptr()) % 16 == 0);
    }
  }

  TEST_CASE("DDP's reducer names a parameter cast or moved after its buckets were made") {
    auto comm = std::make_shared<distributed::Communicator>(env_of(0, 1, free_port() + 47));
    torch::nn::Linear layer(3, 2);
    distributed::Reducer reducer(layer->parameters(), comm);
    {
      torch::NoGradGuard no_grad;
      layer->bias.set_data(layer->bias.to(torch::kDouble));
    }
    CHECK(error_of([&] { reducer.prepare(); }) ==
          "to_distributed: parameter 1 is now Double on cpu, but its gradient bucket holds Float on cpu: DDP's "
          "buckets are made when the fit starts; cast or move the model before fit, not during it");
  }

  TEST_CASE("DDP's buckets follow the order the first backward produced the gradients in, on both ranks") {
    // Each layer's weight and bias fill a bucket. The first guess (the reverse of the
    // parameters' order) puts the layer whose gradients come last in bucket 0, so every
    // all-reduce waits for the whole backward; from the second backward on each bucket
    // starts as soon as its two gradients are in.
    const int port = free_port() + 43;
    std::vector<std::vector<std::vector<size_t>>> buckets(2);
    std::vector<std::vector<size_t>> first_points(2), later_points(2);
    std::vector<std::vector<torch::Tensor>> grads(2);
    torch::manual_seed(1);
    const auto inputs = torch::randn({2, 3, 6});
    // The same weights on both ranks, drawn before the ranks' threads start: the global
    // generator is shared by both threads, whose draws could interleave.
    std::vector<std::shared_ptr<ReversedLayers>> models;
    for (int r = 0; r < 2; ++r) {
      torch::manual_seed(0);
      models.push_back(std::make_shared<ReversedLayers>());
    }
    const auto errors = in_two_threads([&](int r) {
      auto comm = std::make_shared<distributed::Communicator>(env_of(r, 2, port));
      ReversedLayers& model = *models[static_cast<size_t>(r)];
      distributed::Reducer reducer(model.parameters(), comm, {.bucket_bytes = 150, .first_bucket_bytes = 150});
      for (int step = 0; step < 2; ++step) {
        reduced_backward(reducer, model, [&] { return model.forward(inputs[r]).sum(); });
        (step == 0 ? first_points : later_points)[static_cast<size_t>(r)] = reducer.launch_points();
      }
      buckets[static_cast<size_t>(r)] = reducer.bucket_params();
      for (const auto& param : model.parameters()) grads[static_cast<size_t>(r)].push_back(param.grad().clone());
    });
    REQUIRE(errors[0] == "(nothing thrown)");
    REQUIRE(errors[1] == "(nothing thrown)");
    const std::vector<std::vector<size_t>> expected_buckets{{0, 1}, {2, 3}, {4, 5}, {6, 7}};
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      CHECK(first_points[r] == std::vector<size_t>{8, 8, 8, 8});
      CHECK(later_points[r] == std::vector<size_t>{2, 4, 6, 8});
      auto sorted = buckets[r];
      for (auto& bucket : sorted) std::sort(bucket.begin(), bucket.end());
      CHECK(sorted == expected_buckets);
    }
    // Both ranks end with the average of their gradients: one process's on both halves.
    torch::manual_seed(0);
    ReversedLayers single;
    (single.forward(inputs[0]).sum() + single.forward(inputs[1]).sum()).div(2).backward();
    const auto expected = single.parameters();
    for (size_t k = 0; k < expected.size(); ++k) {
      CAPTURE(k);
      CHECK(torch::allclose(grads[0][k], expected[k].grad(), 1e-6, 1e-7));
      CHECK(torch::equal(grads[0][k], grads[1][k]));
    }
  }

  TEST_CASE("DDP reduces a weight tied between two layers once, with one hook, to 1 process's gradient") {
    // A bucket per parameter: a second hook on the tied weight would copy its gradient out
    // of a bucket whose all-reduce runs.
    const int port = free_port() + 57;
    std::vector<std::shared_ptr<TiedLayers>> models;
    for (int r = 0; r < 2; ++r) {
      torch::manual_seed(0);
      models.push_back(std::make_shared<TiedLayers>());
    }
    REQUIRE(models[0]->parameters().size() == 5);  // the tied weight twice
    torch::manual_seed(1);
    const auto inputs = torch::randn({2, 3, 6});
    std::vector<std::vector<std::vector<size_t>>> buckets(2);
    std::vector<size_t> hooks(2);
    std::vector<std::vector<torch::Tensor>> grads(2);
    const auto errors = in_two_threads([&](int r) {
      auto comm = std::make_shared<distributed::Communicator>(env_of(r, 2, port));
      TiedLayers& model = *models[static_cast<size_t>(r)];
      const auto accumulator = torch::autograd::impl::grad_accumulator(model.encoder->weight);
      const auto before = accumulator->post_hooks().size();
      distributed::Reducer reducer(model.parameters(), comm, {.bucket_bytes = 1, .first_bucket_bytes = 1});
      hooks[static_cast<size_t>(r)] = accumulator->post_hooks().size() - before;
      for (int step = 0; step < 3; ++step)
        reduced_backward(reducer, model, [&] { return model.forward(inputs[r]).square().sum(); });
      buckets[static_cast<size_t>(r)] = reducer.bucket_params();
      for (const auto& param : unique_parameters(model.parameters()))
        grads[static_cast<size_t>(r)].push_back(param.grad().clone());
    });
    REQUIRE(errors[0] == "(nothing thrown)");
    REQUIRE(errors[1] == "(nothing thrown)");
    torch::manual_seed(0);
    TiedLayers single;
    (single.forward(inputs[0]).square().sum() + single.forward(inputs[1]).square().sum()).div(2).backward();
    const auto expected = unique_parameters(single.parameters());
    REQUIRE(expected.size() == 4);
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      CHECK(hooks[r] == 1);
      std::vector<size_t> reduced;
      for (const auto& bucket : buckets[r]) reduced.insert(reduced.end(), bucket.begin(), bucket.end());
      std::sort(reduced.begin(), reduced.end());
      CHECK(reduced == std::vector<size_t>{0, 1, 2, 3});
      REQUIRE(grads[r].size() == expected.size());
      for (size_t k = 0; k < expected.size(); ++k) {
        CAPTURE(k);
        CHECK(torch::allclose(grads[r][k], expected[k].grad(), 1e-5, 1e-6));
      }
    }
  }

  TEST_CASE("DDP averages half-precision gradients whose sum would overflow: divided before the all-reduce") {
    // Each rank's gradient is 40000; their sum, 80000, is past half's largest (65504).
    const int port = free_port() + 64;
    std::vector<torch::Tensor> params, grads(2), handed(2);
    for (int r = 0; r < 4; ++r) params.push_back(torch::ones({3}, torch::kHalf).requires_grad_());
    const auto errors = in_two_threads([&](int r) {
      auto comm = std::make_shared<distributed::Communicator>(env_of(r, 2, port));
      auto& param = params[static_cast<size_t>(r)];
      auto& leaving = params[static_cast<size_t>(r + 2)];
      distributed::Reducer reducer({param, leaving}, comm);
      param.mutable_grad() = torch::Tensor();
      reducer.prepare();
      (param * 40000).sum().backward();
      reducer.finalize();
      grads[static_cast<size_t>(r)] = param.grad().clone();
      leaving.mutable_grad() = torch::full({3}, 40000, torch::kHalf);  // set by other code, then handed over
      reducer.hand_over({1});
      handed[static_cast<size_t>(r)] = leaving.grad().clone();
    });
    REQUIRE(errors[0] == "(nothing thrown)");
    REQUIRE(errors[1] == "(nothing thrown)");
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      CHECK(torch::equal(grads[r], torch::full({3}, 40000, torch::kHalf)));
      CHECK(torch::equal(handed[r], torch::full({3}, 40000, torch::kHalf)));
    }
  }

  TEST_CASE("launcher variables are read and checked") {
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "2", 1);
    CHECK(error_of([] { distributed::read_env(); }) == "RANK 3 is outside the world of 2 processes (WORLD_SIZE)");
    setenv("RANK", "1", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "12345", 1);
    const auto env = distributed::read_env();
    CHECK(env.rank == 1);
    CHECK(env.world_size == 2);
    CHECK(env.master_port == 12345);
    setenv("WORLD_SIZE", "two", 1);
    CHECK(error_of([] { distributed::read_env(); }) == "environment variable WORLD_SIZE='two' is not an integer");
    setenv("WORLD_SIZE", "1", 1);
    setenv("RANK", "0", 1);
    setenv("LOCAL_RANK", "0", 1);
    CHECK(distributed::read_env().is_distributed());  // torchrun's world of 1 is still DDP
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(name);
    CHECK(!distributed::read_env().is_distributed());
    // Slurm's variables are in every job: its one task is a single process, two are a world.
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_STEP_ID", "0", 1);
    setenv("SLURM_NTASKS", "1", 1);
    CHECK(distributed::read_env().source == "slurm");
    CHECK(!distributed::read_env().is_distributed());
    setenv("SLURM_NTASKS", "2", 1);
    CHECK(distributed::read_env().is_distributed());
    for (const char* name : {"SLURM_PROCID", "SLURM_STEP_ID", "SLURM_NTASKS"}) unsetenv(name);
  }

  TEST_CASE("RANK and WORLD_SIZE come together, and a world of several processes needs MASTER_ADDR and MASTER_PORT") {
    const std::string both = " is not set (or is empty) while ";
    CHECK(env_error({{"RANK", "1"}}) == "WORLD_SIZE" + both + "RANK is: set both, as torchrun and fastcpp-launch do");
    CHECK(env_error({{"RANK", "1"}, {"WORLD_SIZE", ""}}) ==
          "WORLD_SIZE" + both + "RANK is: set both, as torchrun and fastcpp-launch do");
    CHECK(env_error({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29501"}}) ==
          "RANK" + both + "WORLD_SIZE is: set both, as torchrun and fastcpp-launch do");
    CHECK(env_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29501"}}) ==
          "MASTER_ADDR is not set (WORLD_SIZE 2): set it on every process to the address of the host running rank 0");
    CHECK(env_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", ""}}) ==
          "MASTER_PORT is not set (WORLD_SIZE 2): set it on every process to the port for rank 0's rendezvous store");
    CHECK(env_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "0"}, {"MASTER_ADDR", "node0"},
                     {"MASTER_PORT", "29501"}}) == "LOCAL_WORLD_SIZE must be >= 1, got 0");
    const auto env = env_from({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29501"}});
    CHECK(env.rank == 1);
    CHECK(env.world_size == 2);
    CHECK(env.local_rank == 1);
    CHECK(env.local_world_size == 2);
    CHECK(env.master_addr == "node0");
    CHECK(env.master_port == 29501);
    // A world of one meets nobody: its rank 0 serves itself on the loopback.
    const auto alone = env_from({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
    CHECK(alone.is_distributed());
    CHECK(alone.master_addr == "127.0.0.1");
    CHECK(alone.master_port == 29500);
    // LOCAL_RANK alone (a GPU chosen by hand) is still one process.
    const auto one = env_from({{"LOCAL_RANK", "3"}});
    CHECK(!one.is_distributed());
    CHECK(one.local_rank == 0);
  }

  TEST_CASE("errors in Slurm's and Open MPI's values name the variables read") {
    CHECK(env_error({{"SLURM_PROCID", "4"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "4"}}) ==
          "SLURM_PROCID 4 is outside the world of 4 processes (SLURM_NTASKS)");
    CHECK(env_error({{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "0"}}) ==
          "SLURM_NTASKS must be >= 1, got 0");
    CHECK(env_error({{"SLURM_PROCID", "1"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "2"},
                     {"SLURM_NTASKS_PER_NODE", "2"}}) ==
          "SLURM_LOCALID 2 is outside the 2 processes of this node (SLURM_NTASKS_PER_NODE)");
    CHECK(env_error({{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "4"},
                     {"SLURM_NTASKS_PER_NODE", "0"}}) ==
          "SLURM_NTASKS_PER_NODE must be >= 1, got 0");
    // Without SLURM_STEP_TASKS_PER_NODE or SLURM_NTASKS_PER_NODE the node's share is the whole world.
    CHECK(env_error({{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "2"}}) ==
          "SLURM_LOCALID 2 is outside the 2 processes of this node (SLURM_NTASKS)");
    CHECK(env_error({{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "4"},
                     {"SLURM_STEP_TASKS_PER_NODE", "2(x2"}}) ==
          "environment variable SLURM_STEP_TASKS_PER_NODE='2(x2' is not a list of task counts such as 4(x2),3");
    CHECK(env_error({{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "4"},
                     {"SLURM_STEP_TASKS_PER_NODE", "4(x0)"}}) ==
          "environment variable SLURM_STEP_TASKS_PER_NODE='4(x0)' is not a list of task counts such as 4(x2),3");
    CHECK(env_error({{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "5"},
                     {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"}}) ==
          "environment variable SLURM_STEP_TASKS_PER_NODE='2(x2),1' gives the nodes different task counts, and "
          "SLURM_NODEID does not say which node this is");
    CHECK(env_error({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}}) ==
          "OMPI_COMM_WORLD_RANK 2 is outside the world of 2 processes (OMPI_COMM_WORLD_SIZE)");
    CHECK(env_error({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}) ==
          "OMPI_COMM_WORLD_LOCAL_RANK 3 is outside the 2 processes of this node (OMPI_COMM_WORLD_LOCAL_SIZE)");
    CHECK(env_error({{"RANK", "3"}, {"WORLD_SIZE", "2"}}) == "RANK 3 is outside the world of 2 processes (WORLD_SIZE)");
  }

  TEST_CASE("a Slurm host list expands to its hosts, each range's zero padding kept; a malformed one is named") {
    using Hosts = std::vector<std::string>;
    CHECK(distributed::expand_hostlist("node01") == Hosts{"node01"});
    CHECK(distributed::expand_hostlist("node[01-03,07]") == Hosts{"node01", "node02", "node03", "node07"});
    CHECK(distributed::expand_hostlist("a1,b[2-3]") == Hosts{"a1", "b2", "b3"});
    CHECK(distributed::expand_hostlist("gpu-[9-11]") == Hosts{"gpu-9", "gpu-10", "gpu-11"});
    CHECK(distributed::expand_hostlist("n[098-100],login") == Hosts{"n098", "n099", "n100", "login"});
    CHECK(distributed::expand_hostlist("r[1-2]n[5,7]") == Hosts{"r1n5", "r1n7", "r2n5", "r2n7"});
    const auto error = [](const std::string& list) {
      return error_of([&] { distributed::expand_hostlist(list, "SLURM_STEP_NODELIST"); });
    };
    const std::string where = "SLURM_STEP_NODELIST '";
    CHECK(error("node[01-03") == where + "node[01-03' is malformed: a '[' without its ']'");
    CHECK(error("node01]") == where + "node01]' is malformed: a ']' without its '['");
    CHECK(error("node[3-1]") == where + "node[3-1]' is malformed: the range 3-1 runs backwards");
    CHECK(error("node[a-c]") ==
          where + "node[a-c]' is malformed: 'a-c' in '[a-c]' is not a number or a range such as 01-03");
    CHECK(error("node[1,]") == where + "node[1,]' is malformed: an empty value in '[1,]'");
    CHECK(error("a,,b") == where + "a,,b' is malformed: an empty host name");
    CHECK(error("a,") == where + "a,' is malformed: an empty host name");
    CHECK(error("") == where + "' is malformed: no host");
    CHECK(error_of([] { distributed::expand_hostlist("[[1]]"); }) ==
          "host list '[[1]]' is malformed: a '[' inside '[...]'");
  }

  TEST_CASE("a Slurm run over several nodes without MASTER_ADDR meets at the first host of its node list") {
    const auto two_nodes = [](const Variables& more) {
      Variables all{{"SLURM_PROCID", "2"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"},
                    {"SLURM_NTASKS_PER_NODE", "2"}, {"SLURM_JOB_NUM_NODES", "2"}};
      all.insert(all.end(), more.begin(), more.end());
      return all;
    };
    const auto env =
        env_from(two_nodes({{"SLURM_STEP_NODELIST", "node[07-08]"}, {"SLURM_JOB_NODELIST", "node[01-08]"}}));
    CHECK(env.master_addr == "node07");  // the step's first node, where task 0 runs
    CHECK(env.master_port == 29500);
    CHECK(env.rank == 2);
    CHECK(env.local_world_size == 2);
    CHECK(env_from(two_nodes({{"SLURM_JOB_NODELIST", "gpu-[9-11]"}})).master_addr == "gpu-9");
    const auto chosen = env_from(two_nodes({{"SLURM_STEP_NODELIST", "a1,b[2-3]"}, {"MASTER_ADDR", "10.0.0.1"},
                                            {"MASTER_PORT", "29600"}}));
    CHECK(chosen.master_addr == "10.0.0.1");
    CHECK(chosen.master_port == 29600);
    CHECK(env_error(two_nodes({})) ==
          "MASTER_ADDR is not set, and the run spans nodes (SLURM_JOB_NUM_NODES 2) with neither SLURM_STEP_NODELIST "
          "nor SLURM_JOB_NODELIST to name the first: set MASTER_ADDR to the address of the host running rank 0");
    CHECK(env_error(two_nodes({{"SLURM_STEP_NODELIST", "node[07-"}})) ==
          "SLURM_STEP_NODELIST 'node[07-' is malformed: a '[' without its ']'");
    // SLURM_NNODES tells it too, and so do more tasks than one node's.
    CHECK(env_from({{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NNODES", "2"},
                    {"SLURM_JOB_NODELIST", "node01,node02"}})
              .master_addr == "node01");
    CHECK(env_from({{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "4"},
                    {"SLURM_NTASKS_PER_NODE", "2"},
                    {"SLURM_JOB_NODELIST", "node01,node02"}})
              .master_addr == "node01");
    // On one node the processes meet on the loopback.
    CHECK(env_from({{"SLURM_PROCID", "1"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NUM_NODES", "1"},
                    {"SLURM_JOB_NODELIST", "node01"}})
              .master_addr == "127.0.0.1");
    // Open MPI gives no node list: over several nodes MASTER_ADDR must say where rank 0 is.
    CHECK(env_error({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}) ==
          "MASTER_ADDR is not set, and the run spans nodes (OMPI_COMM_WORLD_LOCAL_SIZE 2 of OMPI_COMM_WORLD_SIZE 4): "
          "set it to the address of the host running rank 0");
  }

  TEST_CASE("a Slurm step's share of each node is the step's (SLURM_STEP_TASKS_PER_NODE), its nodes the step's") {
    // sbatch -N2 -n8 without --ntasks-per-node: no SLURM_NTASKS_PER_NODE, 4 tasks on each node.
    const Variables step{{"SLURM_PROCID", "5"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                         {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"}, {"SLURM_NNODES", "2"},
                         {"SLURM_STEP_NODELIST", "node[1-2]"}, {"SLURM_JOB_ID", "100"}};
    const auto env = env_from(step);
    CHECK(env.local_world_size == 4);
    CHECK(env.master_addr == "node1");
    CHECK(env.master_port == 10100);
    // Before the job's SLURM_NTASKS_PER_NODE: srun -n2 under --ntasks-per-node=8.
    CHECK(env_from({{"SLURM_PROCID", "1"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "2"},
                    {"SLURM_STEP_TASKS_PER_NODE", "2"}, {"SLURM_NTASKS_PER_NODE", "8"}})
              .local_world_size == 2);
    // Nodes with different counts: SLURM_NODEID says which is this one.
    CHECK(env_from({{"SLURM_PROCID", "4"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "5"}, {"SLURM_NODEID", "2"},
                    {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"}, {"MASTER_ADDR", "node1"}})
              .local_world_size == 1);
    // srun -N1 inside an allocation of two nodes: one node, the loopback.
    CHECK(env_from({{"SLURM_PROCID", "1"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "2"},
                    {"SLURM_STEP_NUM_NODES", "1"}, {"SLURM_JOB_NUM_NODES", "2"}, {"SLURM_JOB_NODELIST", "node[1-2]"}})
              .master_addr == "127.0.0.1");
    // Two steps of one job at once on a node: a port each.
    auto second_step = step;
    second_step[1] = {"SLURM_STEP_ID", "1"};
    CHECK(env_from(second_step).master_port == 10000 + (100 + 7919) % 20000);
  }

  TEST_CASE("RANK without LOCAL_RANK (a node started by hand): the place among the node's LOCAL_WORLD_SIZE") {
    const auto env = env_from({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"},
                               {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}});
    CHECK(env.local_rank == 1);
  }

  TEST_CASE("a batch script's shell is one process although Slurm's task variables say more, and says so once") {
    std::ostringstream said;
    auto* const previous = std::cerr.rdbuf(said.rdbuf());
    const Variables batch_shell{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "4242"}};
    const auto alone = env_from(batch_shell);
    const auto again = env_from(batch_shell);
    std::cerr.rdbuf(previous);
    CHECK(alone.source == "none");
    CHECK(!alone.is_distributed());
    CHECK(again.world_size == 1);
    CHECK(said.str() ==
          "fastcpp: SLURM_NTASKS is 4, but srun did not start this process (no SLURM_STEP_ID): it trains alone; start "
          "it with srun to train as 4 processes\n");
    // srun's tasks have a step: the same variables are then a world of 4.
    auto task = batch_shell;
    task.emplace_back("SLURM_STEP_ID", "0");
    CHECK(env_from(task).world_size == 4);
  }

  TEST_CASE("to_distributed refuses a model split across devices before it forms a group, naming them") {
    Learner learn(synthetic_dls(), split_over_cpu_and_meta(), CrossEntropyLoss(), {}, quiet());
    learn.to_distributed();
    const LauncherVariables variables(
        {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}});
    CHECK(error_of([&] { learn.fit(1); }) ==
          "Exception occurred in `DistributedTrainer` when calling event `before_fit`:\n\tto_distributed: the model is "
          "on cpu and meta (split across devices); its gradients are reduced on one device a process: put each "
          "process's model on one, or train the pipeline in one process");
  }

  TEST_CASE("under Slurm the default port comes from the job, so that jobs sharing a node meet apart") {
    const Variables task{{"SLURM_PROCID", "1"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "2"}};
    auto job = [&](const char* id) {
      auto variables = task;
      variables.emplace_back("SLURM_JOB_ID", id);
      return variables;
    };
    CHECK(env_from(job("4242")).master_port == 14242);
    CHECK(env_from(job("20017")).master_port == 10017);
    CHECK(env_from(task).master_port == 29500);  // no job id: torch's default
    auto chosen = job("4242");
    chosen.emplace_back("MASTER_PORT", "29600");
    CHECK(env_from(chosen).master_port == 29600);
    CHECK(env_from(job("67108868123")).master_port == 18123);  // a federated cluster's job, past 2^31
    CHECK(env_error(job("12a")) == "environment variable SLURM_JOB_ID='12a' is not a job number");
    CHECK(env_error(job("-5")) == "environment variable SLURM_JOB_ID='-5' is not a job number");
    auto chosen_odd = job("12a");
    chosen_odd.emplace_back("MASTER_PORT", "29600");
    CHECK(env_from(chosen_odd).master_port == 29600);  // the job id is not read then
    // Other launchers keep torch's port.
    CHECK(env_from({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"SLURM_JOB_ID", "4242"}})
              .master_port == 29500);
    // mpirun in an allocation: its daemons' Slurm task numbers are nodes, Open MPI's are the ranks.
    const auto mpirun = env_from({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                  {"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "1"}, {"SLURM_NTASKS", "2"}});
    CHECK(mpirun.source == "openmpi");
    CHECK(mpirun.rank == 3);
    CHECK(mpirun.world_size == 4);
  }

  TEST_CASE("a Slurm run over several nodes whose master address is a loopback one here stops at once on rank 0") {
    const auto env = env_from({{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "2"},
                               {"SLURM_JOB_NUM_NODES", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                               {"MASTER_PORT", std::to_string(free_port() + 66)}});
    const auto start = std::chrono::steady_clock::now();
    CHECK(any_error_of([&] { distributed::Communicator comm(env); }) ==
          "rank 0 cannot serve the rendezvous: MASTER_ADDR 127.0.0.1 is 127.0.0.1 on this host, a loopback address "
          "the other nodes cannot reach (SLURM_JOB_NUM_NODES 2): set MASTER_ADDR to this host's network address, or "
          "map its name to that address in /etc/hosts");
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
    CHECK(distributed::loopback_address("127.0.0.1") == "127.0.0.1");
    CHECK(distributed::loopback_address("::1") == "::1");
    CHECK(distributed::loopback_address("10.1.2.3") == "");
    CHECK(distributed::loopback_address("no-such-host.invalid") == "");
  }

  TEST_CASE("forming the group waits out a late process for the rendezvous timeout, not the collectives' one") {
    const int port = free_port() + 67;
    const distributed::ProcessGroupOptions options{.timeout = std::chrono::seconds(1),
                                                   .rendezvous_timeout = std::chrono::seconds(20)};
    float sums[2] = {0, 0};
    const auto errors = in_two_threads([&](int r) {
      if (r == 1) std::this_thread::sleep_for(std::chrono::seconds(3));  // its node started later
      distributed::Communicator comm(env_of(r, 2, port), options);
      auto value = torch::full({1}, static_cast<float>(r + 1));
      comm.all_reduce_sum(value);
      sums[r] = value.item<float>();
    });
    CHECK(errors[0] == "(nothing thrown)");
    CHECK(errors[1] == "(nothing thrown)");
    CHECK(sums[0] == 3);
    CHECK(sums[1] == 3);
    CHECK(distributed::ProcessGroupOptions{}.rendezvous_timeout == std::chrono::minutes(10));
  }
}
