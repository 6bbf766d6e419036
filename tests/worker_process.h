#pragma once
// Starting tests/dist_worker as separate processes (the ranks of a distributed run) and
// reading what they wrote.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "helpers.h"

extern char** environ;

namespace fastcpp::testing {

// Below Linux's ephemeral ports (32768 and up, which outgoing connections take), with
// room for the offsets the tests add.
inline int free_port() { return 20000 + static_cast<int>(::getpid() % 12000); }

// Starts dist_worker with extra environment variables (its output to `log` if given); returns its pid.
inline pid_t spawn_worker(const std::string& mode, const std::string& out, const std::vector<std::string>& extra_env,
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
inline int wait_for(pid_t pid, int seconds) {
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

// What a worker pickled into `path`.
inline c10::IValue read_pickle(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE_MESSAGE(!bytes.empty(), "no result in " << path);
  return torch::pickle_load(bytes);
}

// A training run's result: [parameters, [valid_loss, accuracy], resumed_from, reductions].
inline c10::impl::GenericList read_result(const std::string& path) { return read_pickle(path).toList(); }

// The two runs ended with the same parameters (to rtol/atol).
inline void check_same_params(const std::string& a, const std::string& b, double rtol = 1e-5, double atol = 1e-6) {
  const auto x = read_result(a).get(0).toTensorList(), y = read_result(b).get(0).toTensorList();
  REQUIRE(x.size() == y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    INFO("parameter " << i << ", largest difference " << (x.get(i) - y.get(i)).abs().max().item<double>());
    CHECK(torch::allclose(x.get(i), y.get(i), rtol, atol));
  }
}

inline std::vector<std::string> rank_env(int rank, int world, int port) {
  return {"RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(world), "LOCAL_RANK=" + std::to_string(rank),
          "LOCAL_WORLD_SIZE=" + std::to_string(world), "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port)};
}

// Runs `mode` on two ranks (with `extra_env` added); returns both ranks' result files.
inline std::vector<std::string> run_two_ranks(const std::string& mode, int port_offset,
                                              const std::vector<std::string>& extra_env = {}) {
  const auto base = temp_path(mode);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    auto env = rank_env(rank, 2, free_port() + port_offset);
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    pids.push_back(spawn_worker(mode, base, env));
  }
  for (auto pid : pids) CHECK(wait_for(pid, 120) == 0);
  return {base + ".0", base + ".1"};
}

// dist_worker's 2 ranks x batch 4 end with the weights and validation metrics of 1 process
// x batch 8 (both with `extra_env`: a device, a backend), those of the last epoch of the
// fit too (each rank's validation batches gathered). Returns the single process's
// validation metric.
inline double check_two_ranks_equal_one_process(int port_offset, const std::vector<std::string>& extra_env = {},
                                                double rtol = 1e-5, double atol = 1e-6) {
  const auto single_out = temp_path("single");
  REQUIRE(wait_for(spawn_worker("single", single_out, extra_env), 120) == 0);
  const auto outs = run_two_ranks("ddp", port_offset, extra_env);
  const auto single = read_result(single_out);
  for (const auto& out : outs) {
    check_same_params(out, single_out, rtol, atol);
    // valid set of 13 on 2 ranks: padded to 14, gathered and trimmed back to 13
    const auto valid = read_result(out).get(1).toDoubleList(), expected = single.get(1).toDoubleList();
    CHECK(valid.get(0) == doctest::Approx(expected.get(0)).epsilon(rtol));
    CHECK(valid.get(1) == doctest::Approx(expected.get(1)).epsilon(1e-9));
    // The last epoch's row: train_loss, valid_loss, the metric.
    const auto row = read_result(out).get(5).toDoubleList(), expected_row = single.get(5).toDoubleList();
    REQUIRE(row.size() == 3);
    REQUIRE(expected_row.size() == 3);
    CHECK(row.get(0) == doctest::Approx(expected_row.get(0)).epsilon(rtol));
    CHECK(row.get(1) == doctest::Approx(expected_row.get(1)).epsilon(rtol));
    // The same items, batched otherwise: each batch's float mean rounds otherwise.
    CHECK(row.get(2) == doctest::Approx(expected_row.get(2)).epsilon(1e-6));
    CHECK(row.get(1) == doctest::Approx(valid.get(0)).epsilon(rtol));  // the fit's last validation is validate()'s
    // A loader of the program's own validated within the fit: its whole set on each rank, as in one process.
    const auto own = read_result(out).get(6).toDoubleList(), expected_own = single.get(6).toDoubleList();
    CHECK(own.get(0) == doctest::Approx(expected_own.get(0)).epsilon(rtol));
    CHECK(own.get(1) == doctest::Approx(expected_own.get(1)).epsilon(1e-9));
    // A test set shared out over the ranks: every item's prediction once and in order, as in one process.
    const auto test_preds = read_result(out).get(7).toTensor(), expected_test = single.get(7).toTensor();
    REQUIRE((test_preds.sizes() == expected_test.sizes()));
    CHECK(torch::allclose(test_preds, expected_test, rtol, atol));
  }
  check_same_params(outs[0], outs[1], rtol, atol);
  for (const auto& out : outs) std::filesystem::remove(out);
  std::filesystem::remove(single_out);
  return single.get(1).toDoubleList().get(1);
}

// SyncBatchNorm on dist_worker's shards of 3 and 5 samples equals BatchNorm on the 8:
// output, input gradient, weight and bias gradients, running statistics.
// `kernels`: whether the ranks' synced layer must take the channels-last kernels' path (on
// the CPU, their twin), as the worker reports.
inline void check_syncbn_equals_batchnorm(int port_offset, const std::vector<std::string>& extra_env = {},
                                          bool kernels = false) {
  const auto single_out = temp_path("bn_single");
  REQUIRE(wait_for(spawn_worker("syncbn_single", single_out, extra_env), 60) == 0);
  const auto outs = run_two_ranks("syncbn", port_offset, extra_env);
  const auto single = read_pickle(single_out).toTensorList();
  for (int rank = 0; rank < 2; ++rank) {
    const auto got = read_pickle(outs[static_cast<size_t>(rank)]).toTensorList();
    const int64_t first = rank == 0 ? 0 : 3, count = rank == 0 ? 3 : 5;
    INFO("rank " << rank);
    CHECK(torch::allclose(got.get(0), single.get(0).narrow(0, first, count), 1e-5, 1e-5));  // y
    CHECK(torch::allclose(got.get(1), single.get(1).narrow(0, first, count), 1e-5, 1e-5));  // dL/dx
    for (size_t i = 2; i < 6; ++i) CHECK(torch::allclose(got.get(i), single.get(i), 1e-5, 1e-5));
    CHECK(got.get(6)[0].item<int>() == (kernels ? 1 : 0));
    CHECK(got.get(6)[1].item<int>() == 1);  // y in the input's memory format
    std::filesystem::remove(outs[static_cast<size_t>(rank)]);
  }
  std::filesystem::remove(single_out);
}

}  // namespace fastcpp::testing
