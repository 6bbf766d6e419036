// fastcpp-launch: starts one process per device on this node with the variables
// torchrun sets, and supervises them.
//
//   fastcpp-launch --nproc-per-node N [--max-restarts K] [--master-addr A]
//                  [--master-port P] [--] PROGRAM [ARGS...]
//
// Every worker gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT and TORCHELASTIC_RESTART_COUNT. SIGINT/SIGTERM are forwarded. When a
// worker fails, the others are stopped (SIGTERM, then SIGKILL after 10 s) and the
// whole group is started again, up to K times; the exit status is the failed
// worker's, or 0.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

volatile sig_atomic_t g_stop_signal = 0;
std::vector<pid_t> g_children;

void on_signal(int signal) {
  g_stop_signal = signal;
  for (pid_t pid : g_children)
    if (pid > 0) kill(pid, signal);
}

int usage() {
  std::fprintf(stderr,
               "usage: fastcpp-launch --nproc-per-node N [--max-restarts K] [--master-addr A] [--master-port P] "
               "[--] PROGRAM [ARGS...]\n");
  return 2;
}

pid_t start_worker(char** program, int rank, int world, const std::string& addr, int port, int restart) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
  setenv("MASTER_ADDR", addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("TORCHELASTIC_RESTART_COUNT", std::to_string(restart).c_str(), 1);
  execvp(program[0], program);
  std::fprintf(stderr, "fastcpp-launch: cannot run %s: %s\n", program[0], std::strerror(errno));
  _exit(127);
}

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// Stops the workers still running: SIGTERM, then SIGKILL after the grace period.
void stop_all(std::vector<pid_t>& running) {
  for (pid_t pid : running) kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!running.empty()) {
    for (size_t i = 0; i < running.size();) {
      int status = 0;
      if (waitpid(running[i], &status, WNOHANG) != 0) running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      else ++i;
    }
    if (std::chrono::steady_clock::now() > deadline)
      for (pid_t pid : running) kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Runs one attempt of the group; returns 0 or the first failure's exit code.
int run_group(char** program, int n, const std::string& addr, int port, int restart, int* failed_rank) {
  g_children.clear();
  for (int rank = 0; rank < n; ++rank) g_children.push_back(start_worker(program, rank, n, addr, port, restart));
  std::vector<pid_t> running = g_children;
  while (!running.empty()) {
    int status = 0;
    const pid_t pid = wait(&status);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    running.erase(std::remove(running.begin(), running.end(), pid), running.end());
    if (exit_code(status) != 0) {
      for (int rank = 0; rank < n; ++rank)
        if (g_children[static_cast<size_t>(rank)] == pid) *failed_rank = rank;
      stop_all(running);
      return exit_code(status);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int nproc = 0, max_restarts = 0, port = 29500;
  std::string addr = "127.0.0.1";
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.rfind("--", 0) != 0) break;
    if (i + 1 >= argc) return usage();
    const char* value = argv[++i];
    if (arg == "--nproc-per-node" || arg == "--nproc_per_node") nproc = std::atoi(value);
    else if (arg == "--max-restarts" || arg == "--max_restarts") max_restarts = std::atoi(value);
    else if (arg == "--master-port" || arg == "--master_port") port = std::atoi(value);
    else if (arg == "--master-addr" || arg == "--master_addr") addr = value;
    else return usage();
  }
  if (nproc < 1 || i >= argc) return usage();
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  for (int attempt = 0;; ++attempt) {
    int failed_rank = -1;
    const int code = run_group(argv + i, nproc, addr, port, attempt, &failed_rank);
    if (code == 0) return 0;
    if (g_stop_signal) return 128 + g_stop_signal;
    if (attempt >= max_restarts) {
      std::fprintf(stderr, "fastcpp-launch: worker %d failed with exit code %d; no restarts left\n", failed_rank, code);
      return code;
    }
    std::fprintf(stderr, "fastcpp-launch: worker %d failed with exit code %d; restarting the group (%d of %d)\n",
                 failed_rank, code, attempt + 1, max_restarts);
  }
}
