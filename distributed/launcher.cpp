// fastcpp-launch: starts one process per device on this node with the variables
// torchrun sets, and supervises them.
//
//   fastcpp-launch --nproc-per-node N [--nnodes M --node-rank R] [--max-restarts K]
//                  [--master-addr A] [--master-port P | --rdzv-endpoint A:P] [--] PROGRAM [ARGS...]
//
// torchrun's spellings (--nproc_per_node, --node_rank, ...) work too.
// Every worker gets RANK, LOCAL_RANK, GROUP_RANK, GROUP_WORLD_SIZE, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT,
// TORCHELASTIC_MAX_RESTARTS and TORCHELASTIC_USE_AGENT_STORE=False (rank 0 serves the
// rendezvous), and with N > 1, OMP_NUM_THREADS=1 unless it is set, as torchrun gives them.
// Each worker leads a process group of its own, and every signal goes to the whole group:
// what a worker started (a script's programs) ends with it. With M nodes, one launcher
// runs on each (node ranks 0..M-1, the same N everywhere) and node R's workers are
// ranks R*N .. R*N+N-1; rank 0, on node 0, serves the rendezvous at A:P, so A must be
// node 0's address (--rdzv-endpoint: HOST, HOST:PORT, [IPv6] or [IPv6]:PORT; without a port,
// --master-port's). SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to the workers; no group
// starts again, workers still running 30 s later get SIGKILL, and once they end the exit
// status is 128 + the signal (0 if all ended with 0).
// A SIGHUP ignored when the launcher starts, as under nohup, stays ignored, by the workers too.
// When a worker fails, the others on this node are stopped (after 3 s, SIGTERM, then
// SIGKILL after 10 s) and this node's group is started again, up to K times; workers on
// other nodes fail with it and their launchers restart them, and a lost node is started
// again by its scheduler: the new groups meet at the same address. The exit status is the
// failed worker's, or 0.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/command_line.h"

namespace {

using Clock = std::chrono::steady_clock;

// Signals are taken synchronously: blocked all along and waited for in sigtimedwait, with
// SIGCHLD. No handler can then run between a fork and the record of its pid, nor signal a
// worker after it was reaped (its pid may belong to another process by then).
sigset_t g_awaited;       // the stop signals and SIGCHLD
sigset_t g_startup_mask;  // the launcher's at the start, the workers'
int g_stop_signal = 0;

// Never runs (the signals stay blocked): it keeps SIGCHLD, ignored by default, from being discarded.
void on_awaited_signal(int) {}

void take_signals_synchronously() {
  sigemptyset(&g_awaited);
  sigaddset(&g_awaited, SIGCHLD);
  for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    struct sigaction old {};
    sigaction(signal, nullptr, &old);
    // Ignored by nohup: the job is to outlive the terminal.
    if (signal == SIGHUP && old.sa_handler == SIG_IGN) continue;
    sigaddset(&g_awaited, signal);
  }
  struct sigaction action {};
  action.sa_handler = on_awaited_signal;
  for (int signal = 1; signal < NSIG; ++signal)
    if (sigismember(&g_awaited, signal) == 1) sigaction(signal, &action, nullptr);
  sigprocmask(SIG_BLOCK, &g_awaited, &g_startup_mask);
}

// Sends `signal` to the process group of each worker not yet reaped (the entries of `workers`
// that are not 0): each worker leads one, with what it started.
void signal_groups(const std::vector<pid_t>& workers, int signal) {
  for (pid_t pid : workers)
    if (pid > 0) killpg(pid, signal);
}

// Waits up to `timeout` for a worker's exit or a stop signal; the latter is recorded and
// forwarded to the workers not yet reaped (the entries of `workers` that are not 0).
void await_event(const std::vector<pid_t>& workers, Clock::duration timeout) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::max(timeout, Clock::duration::zero()));
  const timespec wait{static_cast<time_t>(ns.count() / 1000000000), static_cast<long>(ns.count() % 1000000000)};
  const int signal = sigtimedwait(&g_awaited, nullptr, &wait);
  if (signal <= 0 || signal == SIGCHLD) return;
  g_stop_signal = signal;
  signal_groups(workers, signal);
}

// The stop signals that came while no worker ran.
void take_pending_signals() {
  const timespec now{0, 0};
  for (int signal; (signal = sigtimedwait(&g_awaited, nullptr, &now)) > 0;)
    if (signal != SIGCHLD) g_stop_signal = signal;
}

struct Job {
  int nproc = 0, nnodes = 1, node_rank = 0, max_restarts = 0, port = 29500;
  bool default_threads = false;  // OMP_NUM_THREADS unset with several workers: 1 each, as torchrun
  std::string addr = "127.0.0.1";
  std::vector<std::string> program;  // the worker's command line

  int rank_of(int local_rank) const { return node_rank * nproc + local_rank; }
};

pid_t start_worker(const Job& job, int local_rank, int restart) {
  const pid_t pid = fork();
  if (pid > 0) setpgid(pid, pid);  // here too: the launcher may signal the group before the child runs
  if (pid != 0) return pid;
  setpgid(0, 0);
  // The signals as the launcher found them: a signal that comes before exec then acts on the worker.
  for (int signal = 1; signal < NSIG; ++signal)
    if (sigismember(&g_awaited, signal) == 1) std::signal(signal, SIG_DFL);
  sigprocmask(SIG_SETMASK, &g_startup_mask, nullptr);
  setenv("RANK", std::to_string(job.rank_of(local_rank)).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(local_rank).c_str(), 1);
  setenv("GROUP_RANK", std::to_string(job.node_rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(job.nnodes * job.nproc).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(job.nproc).c_str(), 1);
  setenv("MASTER_ADDR", job.addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(job.port).c_str(), 1);
  setenv("GROUP_WORLD_SIZE", std::to_string(job.nnodes).c_str(), 1);
  setenv("TORCHELASTIC_RESTART_COUNT", std::to_string(restart).c_str(), 1);
  setenv("TORCHELASTIC_MAX_RESTARTS", std::to_string(job.max_restarts).c_str(), 1);
  setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);
  if (job.default_threads) setenv("OMP_NUM_THREADS", "1", 1);
  std::vector<char*> argv;
  for (const auto& arg : job.program) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "fastcpp-launch: cannot run %s: %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

// A child that has exited, not yet reaped (its pid still taken), or 0.
pid_t next_exited() {
  siginfo_t info{};
  if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return 0;
  return info.si_pid;
}

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// Runs one attempt of this node's group; returns 0 or the first failure's exit code.
// After a failure the other workers first get a few seconds to end on their own: one
// blocked in a collective with the failed one fails at once and says which rank it lost.
// Then SIGTERM, and SIGKILL 10 s later.
int run_group(const Job& job, int restart, int* failed_local_rank) {
  const auto terminate_after = std::chrono::seconds(3), kill_after = terminate_after + std::chrono::seconds(10);
  const auto kill_after_stop = std::chrono::seconds(30);  // torchrun's grace after a stop signal
  std::vector<pid_t> workers;  // 0 once reaped
  int code = 0, escalations = 0;  // SIGTERM, then SIGKILL
  Clock::time_point failed_at, stopped_at;
  bool stop_killed = false;
  const auto fail = [&](int local_rank, int status_code) {
    if (code != 0) return;
    code = status_code, *failed_local_rank = local_rank;
    failed_at = Clock::now();
  };
  for (int local = 0; local < job.nproc && code == 0; ++local) {
    const pid_t pid = start_worker(job, local, restart);
    if (pid < 0) {
      std::fprintf(stderr, "fastcpp-launch: cannot start worker %d: %s\n", local, std::strerror(errno));
      fail(local, 1);
    }
    workers.push_back(std::max<pid_t>(pid, 0));
  }
  for (;;) {
    for (pid_t pid; (pid = next_exited()) > 0;) {
      const auto worker = std::find(workers.begin(), workers.end(), pid);
      // What it left running (a script's background jobs) ends with it, while its exit still
      // holds the group's id: once reaped, the id may name another process's group.
      if (worker != workers.end()) killpg(pid, SIGKILL);
      int status = 0;
      waitpid(pid, &status, 0);
      if (worker == workers.end()) continue;
      *worker = 0;
      if (exit_code(status) != 0) fail(static_cast<int>(worker - workers.begin()), exit_code(status));
    }
    if (std::all_of(workers.begin(), workers.end(), [](pid_t pid) { return pid == 0; })) return code;
    Clock::duration timeout = std::chrono::seconds(1);
    if (code != 0) {
      const auto elapsed = Clock::now() - failed_at;
      for (; escalations < (elapsed >= kill_after ? 2 : elapsed >= terminate_after ? 1 : 0); ++escalations)
        signal_groups(workers, escalations == 0 ? SIGTERM : SIGKILL);
      if (escalations < 2) timeout = (escalations == 0 ? terminate_after : kill_after) - elapsed;
    }
    if (g_stop_signal && !stop_killed) {  // workers that ignore the forwarded signal
      if (stopped_at == Clock::time_point()) stopped_at = Clock::now();
      const auto left = kill_after_stop - (Clock::now() - stopped_at);
      if (left <= Clock::duration::zero()) {
        signal_groups(workers, SIGKILL);
        stop_killed = true;
      } else {
        timeout = std::min<Clock::duration>(timeout, left);
      }
    }
    await_event(workers, timeout);
  }
}

// --rdzv-endpoint as torchrun reads it: HOST or HOST:PORT, an IPv6 address in brackets
// ([::1], [::1]:29500; the brackets are no part of the address), without a port
// --master-port's. Sets the job's address and port, or returns why it cannot.
std::string parse_endpoint(const std::string& endpoint, Job& job) {
  const std::string flag = "--rdzv-endpoint " + endpoint;
  std::string host = endpoint, port;
  bool has_port = false;
  if (endpoint.front() == '[') {
    const auto close = endpoint.find(']');
    if (close == std::string::npos) return flag + ": the ] that closes the IPv6 address is missing";
    host = endpoint.substr(1, close - 1);
    const auto rest = endpoint.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return flag + " is not [ADDRESS]:PORT";
    has_port = !rest.empty();
    if (has_port) port = rest.substr(1);
  } else if (const auto colon = endpoint.find(':'); colon != std::string::npos) {
    if (endpoint.find(':', colon + 1) != std::string::npos)
      return flag + ": an IPv6 address goes in brackets, [ADDRESS] or [ADDRESS]:PORT";
    host = endpoint.substr(0, colon), port = endpoint.substr(colon + 1);
    has_port = true;
  }
  if (host.empty()) return flag + " is not HOST:PORT";
  if (has_port) {
    const bool number = !port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos;
    const int value = number ? std::stoi(port) : 0;
    if (value < 1 || value > 65535) return flag + ": the port is not in 1..65535";
    job.port = value;
  }
  job.addr = host;
  return "";
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
  cli.flag("--rdzv-endpoint,--rdzv_endpoint", endpoint,
           "HOST[:PORT] or [IPv6][:PORT], torchrun's form of --master-addr and --master-port");
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
    const auto error = parse_endpoint(endpoint, job);
    if (!error.empty()) return refuse(error);
  }
  if (job.node_rank >= job.nnodes)
    return refuse("--node-rank " + std::to_string(job.node_rank) + " is outside the " + std::to_string(job.nnodes) +
                  " nodes of --nnodes");
  // On several nodes the default 127.0.0.1 would leave every other node waiting out its timeout.
  if (job.nnodes > 1 && !master_addr_given) return refuse("--nnodes " + std::to_string(job.nnodes) +
                                                          " needs --master-addr: the address of node 0");
  job.default_threads = job.nproc > 1 && !std::getenv("OMP_NUM_THREADS");
  if (job.default_threads)
    std::fprintf(stderr, "fastcpp-launch: OMP_NUM_THREADS=1 for each of the %d workers (set it to choose)\n", job.nproc);
  take_signals_synchronously();
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
    // Up to the fork: a stop signal that comes after this stays pending, and is forwarded
    // to the new workers as soon as they run.
    take_pending_signals();
    if (g_stop_signal) return 128 + g_stop_signal;
  }
}
