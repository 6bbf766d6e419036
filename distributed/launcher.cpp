// fastcpp-launch: starts one process per device on this node with the variables
// torchrun sets, and supervises them.
//
//   fastcpp-launch --nproc-per-node N [--nnodes M --node-rank R] [--max-restarts K]
//                  [--master-addr A] [--master-port P | --rdzv-endpoint A:P] [--] PROGRAM [ARGS...]
//
// torchrun's spellings (--nproc_per_node, --node_rank, ...) work too.
// Every worker gets RANK, LOCAL_RANK, GROUP_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT and TORCHELASTIC_RESTART_COUNT. With M nodes, one launcher
// runs on each (node ranks 0..M-1, the same N everywhere) and node R's workers are
// ranks R*N .. R*N+N-1; rank 0, on node 0, serves the rendezvous at A:P, so A must be
// node 0's address. SIGINT/SIGTERM are forwarded. When a worker fails, the others on
// this node are stopped (after 3 s, SIGTERM, then SIGKILL after 10 s) and this node's group is
// started again, up to K times; workers on other nodes fail with it and their
// launchers restart them, and a lost node is started again by its scheduler: the new
// groups meet at the same address. The exit status is the failed worker's, or 0.
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

#include "cli/command_line.h"

namespace {

volatile sig_atomic_t g_stop_signal = 0;
std::vector<pid_t> g_children;

void on_signal(int signal) {
  g_stop_signal = signal;
  for (pid_t pid : g_children)
    if (pid > 0) kill(pid, signal);
}

struct Job {
  int nproc = 0, nnodes = 1, node_rank = 0, max_restarts = 0, port = 29500;
  std::string addr = "127.0.0.1";
  std::vector<std::string> program;  // the worker's command line

  int rank_of(int local_rank) const { return node_rank * nproc + local_rank; }
};

pid_t start_worker(const Job& job, int local_rank, int restart) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  setenv("RANK", std::to_string(job.rank_of(local_rank)).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(local_rank).c_str(), 1);
  setenv("GROUP_RANK", std::to_string(job.node_rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(job.nnodes * job.nproc).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(job.nproc).c_str(), 1);
  setenv("MASTER_ADDR", job.addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(job.port).c_str(), 1);
  setenv("TORCHELASTIC_RESTART_COUNT", std::to_string(restart).c_str(), 1);
  std::vector<char*> argv;
  for (const auto& arg : job.program) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "fastcpp-launch: cannot run %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// Stops the workers still running after one failed. They first get a few seconds to
// end on their own: a worker blocked in a collective with the failed one fails at once
// and says which rank it lost. Then SIGTERM, and SIGKILL 10 s later.
void stop_all(std::vector<pid_t>& running) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto terminate_at = start + std::chrono::seconds(3), kill_at = terminate_at + std::chrono::seconds(10);
  bool terminated = false;
  while (!running.empty()) {
    for (size_t i = 0; i < running.size();) {
      int status = 0;
      if (waitpid(running[i], &status, WNOHANG) != 0) running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      else ++i;
    }
    const auto now = clock::now();
    if (!terminated && now > terminate_at) {
      for (pid_t pid : running) kill(pid, SIGTERM);
      terminated = true;
    }
    if (now > kill_at)
      for (pid_t pid : running) kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Runs one attempt of this node's group; returns 0 or the first failure's exit code.
int run_group(const Job& job, int restart, int* failed_local_rank) {
  g_children.clear();
  for (int local = 0; local < job.nproc; ++local) g_children.push_back(start_worker(job, local, restart));
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
      for (int local = 0; local < job.nproc; ++local)
        if (g_children[static_cast<size_t>(local)] == pid) *failed_local_rank = local;
      stop_all(running);
      return exit_code(status);
    }
  }
  return 0;
}

// "worker 1", and on several nodes "worker 1 (rank 3, node 1)".
std::string worker_name(const Job& job, int local_rank) {
  std::string name = "worker " + std::to_string(local_rank);
  if (job.nnodes > 1)
    name += " (rank " + std::to_string(job.rank_of(local_rank)) + ", node " + std::to_string(job.node_rank) + ")";
  return name;
}

}  // namespace

int main(int argc, char** argv) {
  Job job;
  job.nproc = 1;
  std::string endpoint;
  fastcpp::CommandLine cli("fastcpp-launch",
                           "Starts one worker process per device on this node with the variables torchrun sets "
                           "(RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...), supervises them, and starts the "
                           "group again when a worker fails. Usage: fastcpp-launch [FLAGS] [--] PROGRAM [ARGS...]");
  cli.flag("--nproc-per-node,--nproc_per_node", job.nproc, "workers on this node").range(1, 4096);
  cli.flag("--nnodes", job.nnodes, "nodes, each with a launcher").range(1, 65536);
  cli.flag("--node-rank,--node_rank", job.node_rank, "this node's rank, 0 .. nnodes-1").range(0, 65535);
  cli.flag("--max-restarts,--max_restarts", job.max_restarts, "times the group is started again").range(0, 1000000);
  std::string master_addr;  // empty: not given (127.0.0.1 on one node)
  cli.flag("--master-addr,--master_addr", master_addr, "node 0's address, the rendezvous (one node: 127.0.0.1)");
  cli.flag("--master-port,--master_port", job.port, "the rendezvous port").range(1, 65535);
  cli.flag("--rdzv-endpoint,--rdzv_endpoint", endpoint, "HOST:PORT, torchrun's form of --master-addr and --master-port");
  cli.stop_at_first_argument();
  cli.example("fastcpp-launch --nproc-per-node 2 build/examples/distributed_fashion_mnist --epochs 1");
  cli.example("fastcpp-launch --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --nproc-per-node 8 ./train");
  cli.parse(argc, argv);
  job.program = cli.rest();
  const auto refuse = [](const std::string& why) {
    std::fprintf(stderr, "fastcpp-launch: %s\n", why.c_str());
    return 2;
  };
  if (job.program.empty()) return refuse("no program to launch: fastcpp-launch [FLAGS] [--] PROGRAM [ARGS...]");
  const bool master_addr_given = !master_addr.empty() || !endpoint.empty();
  if (!master_addr.empty()) job.addr = master_addr;
  if (!endpoint.empty()) {
    const auto colon = endpoint.rfind(':');
    if (colon == std::string::npos || colon == 0) return refuse("--rdzv-endpoint " + endpoint + " is not HOST:PORT");
    job.addr = endpoint.substr(0, colon);
    job.port = std::atoi(endpoint.c_str() + colon + 1);
    if (job.port < 1 || job.port > 65535) return refuse("--rdzv-endpoint " + endpoint + ": the port is not in 1..65535");
  }
  if (job.node_rank >= job.nnodes)
    return refuse("--node-rank " + std::to_string(job.node_rank) + " is outside the " + std::to_string(job.nnodes) +
                  " nodes of --nnodes");
  // On several nodes the default 127.0.0.1 would leave every other node waiting out its timeout.
  if (job.nnodes > 1 && !master_addr_given) return refuse("--nnodes " + std::to_string(job.nnodes) +
                                                          " needs --master-addr: the address of node 0");
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  for (int attempt = 0;; ++attempt) {
    int failed = -1;
    const int code = run_group(job, attempt, &failed);
    if (code == 0) return 0;
    if (g_stop_signal) return 128 + g_stop_signal;
    const auto name = worker_name(job, failed);
    if (attempt >= job.max_restarts) {
      std::fprintf(stderr, "fastcpp-launch: %s failed with exit code %d; no restarts left\n", name.c_str(), code);
      return code;
    }
    std::fprintf(stderr, "fastcpp-launch: %s failed with exit code %d; restarting the group (%d of %d)\n",
                 name.c_str(), code, attempt + 1, job.max_restarts);
  }
}
