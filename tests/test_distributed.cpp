// Distributed training on the CPU with Gloo: two processes against one, and the
// errors a user meets when the processes cannot meet.
#include <signal.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "helpers.h"

extern char** environ;

using namespace fastcpp;
using namespace fastcpp::testing;

namespace {

int free_port() { return 20000 + static_cast<int>(::getpid() % 20000); }

// Starts dist_worker with extra environment variables (its output to `log` if given); returns its pid.
pid_t spawn_worker(const std::string& mode, const std::string& out, const std::vector<std::string>& extra_env,
                   const std::string& log = "") {
  std::vector<std::string> env_strings(extra_env);
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string path = FASTCPP_DIST_WORKER;
  std::vector<std::string> args{path, mode, out};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!log.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  pid_t pid = 0;
  const int failed = posix_spawn(&pid, path.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(failed == 0);
  return pid;
}

// Waits up to `seconds`; kills and fails on a hang. Returns the exit status.
int wait_for(pid_t pid, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL("worker " << pid << " hung");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

c10::impl::GenericList read_result(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(!bytes.empty());
  return torch::pickle_load(bytes).toList();
}

std::vector<std::string> rank_env(int rank, int world, int port) {
  return {"RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(world), "LOCAL_RANK=" + std::to_string(rank),
          "LOCAL_WORLD_SIZE=" + std::to_string(world), "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port)};
}

// Runs `mode` on two ranks; returns both ranks' result files.
std::vector<std::string> run_two_ranks(const std::string& mode, int port_offset) {
  const auto base = temp_path(mode);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) pids.push_back(spawn_worker(mode, base, rank_env(rank, 2, free_port() + port_offset)));
  for (auto pid : pids) CHECK(wait_for(pid, 120) == 0);
  return {base + ".0", base + ".1"};
}

// Runs a command line with sh; returns its exit status.
int run_command(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void check_same_params(const std::string& a, const std::string& b) {
  const auto x = read_result(a).get(0).toTensorList(), y = read_result(b).get(0).toTensorList();
  REQUIRE(x.size() == y.size());
  for (size_t i = 0; i < x.size(); ++i) CHECK(torch::allclose(x.get(i), y.get(i), 1e-5, 1e-6));
}

}  // namespace

TEST_SUITE("distributed") {
  TEST_CASE("2 ranks x batch 4 end with the weights and validation metrics of 1 process x batch 8") {
    const auto single_out = temp_path("single");
    REQUIRE(wait_for(spawn_worker("single", single_out, {}), 120) == 0);
    const auto outs = run_two_ranks("ddp", 0);
    const auto single = read_result(single_out);
    const auto single_params = single.get(0).toTensorList();
    for (const auto& out : outs) {
      const auto ddp = read_result(out);
      const auto params = ddp.get(0).toTensorList();
      REQUIRE(params.size() == single_params.size());
      for (size_t i = 0; i < params.size(); ++i)
        CHECK(torch::allclose(params.get(i), single_params.get(i), /*rtol=*/1e-5, /*atol=*/1e-6));
      // valid set of 13 on 2 ranks: padded to 14, gathered and trimmed back to 13
      const auto valid = ddp.get(1).toDoubleList(), expected = single.get(1).toDoubleList();
      CHECK(valid.get(0) == doctest::Approx(expected.get(0)).epsilon(1e-5));
      CHECK(valid.get(1) == doctest::Approx(expected.get(1)).epsilon(1e-9));
    }
    check_same_params(outs[0], outs[1]);
    for (const auto& out : outs) std::filesystem::remove(out);
    std::filesystem::remove(single_out);
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
    const auto single_out = temp_path("bn_single");
    REQUIRE(wait_for(spawn_worker("syncbn_single", single_out, {}), 60) == 0);
    const auto outs = run_two_ranks("syncbn", 6);
    const auto single = torch::pickle_load([&] {
                          std::ifstream in(single_out, std::ios::binary);
                          return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
                        }()).toTensorList();
    for (int rank = 0; rank < 2; ++rank) {
      std::ifstream in(outs[static_cast<size_t>(rank)], std::ios::binary);
      const auto got = torch::pickle_load(std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>())).toTensorList();
      const int64_t first = rank == 0 ? 0 : 3, count = rank == 0 ? 3 : 5;
      INFO("rank " << rank);
      CHECK(torch::allclose(got.get(0), single.get(0).narrow(0, first, count), 1e-5, 1e-5));  // y
      CHECK(torch::allclose(got.get(1), single.get(1).narrow(0, first, count), 1e-5, 1e-5));  // dL/dx
      for (size_t i = 2; i < 6; ++i) CHECK(torch::allclose(got.get(i), single.get(i), 1e-5, 1e-5));
      std::filesystem::remove(outs[static_cast<size_t>(rank)]);
    }
    std::filesystem::remove(single_out);
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

  TEST_CASE("a model with a parameter that gets no gradient finishes") {
    for (const auto& out : run_two_ranks("unused", 1)) {
      CHECK(std::filesystem::exists(out));
      std::filesystem::remove(out);
    }
  }

  TEST_CASE("an unreachable master is an error naming the address within the timeout") {
    distributed::DistEnv env;
    env.rank = 1;
    env.world_size = 2;
    env.master_port = free_port() + 2;
    const auto start = std::chrono::steady_clock::now();
    const auto message = error_of([&] {
      distributed::Communicator comm(env, {.timeout = std::chrono::seconds(2)});
    });
    CHECK(message.rfind("rank 1 of 2: cannot rendezvous at the master 127.0.0.1:" + std::to_string(env.master_port) +
                            " within 2 s",
                        0) == 0);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(15));
  }

  TEST_CASE("processes started with different WORLD_SIZE values both stop with the same explanation") {
    auto env_of = [](int rank, int world) {
      distributed::DistEnv env;
      env.rank = rank, env.world_size = world, env.master_port = free_port() + 3;
      return env;
    };
    std::string messages[2];
    std::thread rank1([&] { messages[1] = error_of([&] { distributed::Communicator(env_of(1, 3), {.timeout = std::chrono::seconds(10)}); }); });
    messages[0] = error_of([&] { distributed::Communicator(env_of(0, 2), {.timeout = std::chrono::seconds(10)}); });
    rank1.join();
    CHECK(messages[0] == "WORLD_SIZE differs between processes: rank 0 has 2, rank 1 has 3; start every process with the same WORLD_SIZE");
    CHECK(messages[1] == "WORLD_SIZE differs between processes: rank 1 has 3, rank 0 has 2; start every process with the same WORLD_SIZE");
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
    CHECK_MESSAGE(output.find("failed on rank 0 (a peer died or timed out?)") != std::string::npos, output);
    for (const auto* suffix : {".log", ".ckpt", ".0", ".1"}) std::filesystem::remove(base + suffix);
  }

  TEST_CASE("rank0_first: rank 0 runs first, the others after it is done") {
    const auto base = temp_path("rank0_first");
    std::filesystem::remove(base);
    run_two_ranks("rank0_first", 5);
    std::ifstream in(base);
    const std::string order((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(order == "0\n1\n");
    std::filesystem::remove(base);
  }

  TEST_CASE("launcher variables are read and checked") {
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "2", 1);
    CHECK(error_of([] { distributed::read_env(); }) == "RANK 3 is outside the world of 2 processes (torchrun variables)");
    setenv("RANK", "1", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("MASTER_PORT", "12345", 1);
    const auto env = distributed::read_env();
    CHECK(env.rank == 1);
    CHECK(env.world_size == 2);
    CHECK(env.master_port == 12345);
    setenv("WORLD_SIZE", "two", 1);
    CHECK(error_of([] { distributed::read_env(); }) == "environment variable WORLD_SIZE='two' is not an integer");
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"}) unsetenv(name);
    CHECK(!distributed::read_env().is_distributed());
  }
}
