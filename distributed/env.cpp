#include "distributed/env.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace fastcpp::distributed {
namespace {

const char* get(const char* name) {
  const char* value = std::getenv(name);
  return value && *value ? value : nullptr;
}

int integer(const char* name, int fallback) {
  const char* value = get(name);
  if (!value) return fallback;
  try {
    size_t used = 0;
    const int parsed = std::stoi(value, &used);
    if (used == std::string(value).size()) return parsed;
  } catch (const std::exception&) {
  }
  throw Error(std::string("environment variable ") + name + "='" + value + "' is not an integer");
}

// The variables a launcher gives a process its place in, for reading and for naming in errors.
struct Names {
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
};

// The run's processes are not all on this node, by the launcher's counts: "" when they
// are (or nothing says), else what shows it ("SLURM_JOB_NUM_NODES 2").
std::string spread_over_nodes(const DistEnv& env, const Names& names) {
  if (env.source == "slurm")  // the step's count first: srun -N1 in an allocation of two runs on one
    for (const char* nodes : {"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"}) {
      if (!get(nodes)) continue;
      if (const int count = integer(nodes, 1); count > 1) return std::string(nodes) + " " + std::to_string(count);
      break;
    }
  if (env.source != "none" && get(names.local_world_size) && env.local_world_size < env.world_size)
    return std::string(names.local_world_size) + " " + std::to_string(env.local_world_size) + " of " +
           names.world_size + " " + std::to_string(env.world_size);
  return "";
}

// The values in a host list's brackets ("01-03,07": 01, 02, 03, 07), each as wide as its range's first.
std::vector<std::string> bracket_values(const std::string& inside, const std::function<Error(std::string)>& malformed) {
  std::vector<std::string> values;
  size_t start = 0;
  while (true) {
    const size_t comma = inside.find(',', start);
    const std::string part = inside.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t dash = part.find('-');
    const std::string low = part.substr(0, dash), high = dash == std::string::npos ? low : part.substr(dash + 1);
    const auto number = [](const std::string& text) {
      return !text.empty() && text.size() <= 9 &&
             std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); });
    };
    if (part.empty()) throw malformed("an empty value in '[" + inside + "]'");
    if (!number(low) || !number(high))
      throw malformed("'" + part + "' in '[" + inside + "]' is not a number or a range such as 01-03");
    const long first = std::stol(low), last = std::stol(high);
    if (first > last) throw malformed("the range " + part + " runs backwards");
    if (last - first >= 100000) throw malformed("the range " + part + " holds more than 100000 hosts");
    for (long n = first; n <= last; ++n) {
      auto text = std::to_string(n);
      if (text.size() < low.size()) text.insert(0, low.size() - text.size(), '0');
      values.push_back(text);
    }
    if (comma == std::string::npos) return values;
    start = comma + 1;
  }
}

// A batch script's shell has Slurm's task variables too (task 0 of the job's count),
// although srun started nothing: a program run there is one process, and says why once.
bool in_slurm_batch_shell() {
  if (!get("SLURM_PROCID") || !get("SLURM_NTASKS") || get("SLURM_STEP_ID") || get("SLURM_STEPID")) return false;
  static std::once_flag said;
  if (const int tasks = integer("SLURM_NTASKS", 1); tasks > 1)
    std::call_once(said, [&] {
      std::cerr << "fastcpp: SLURM_NTASKS is " << tasks
                << ", but srun did not start this process (no SLURM_STEP_ID): it trains alone; start it with srun "
                   "to train as "
                << tasks << " processes\n";
    });
  return true;
}

// SLURM_JOB_ID, which federated clusters number past 2^31.
unsigned long long job_id() {
  const std::string value = get("SLURM_JOB_ID");
  try {
    size_t used = 0;
    const auto parsed = std::stoull(value, &used);
    if (used == value.size() && std::isdigit(static_cast<unsigned char>(value[0]))) return parsed;
  } catch (const std::exception&) {
  }
  throw Error("environment variable SLURM_JOB_ID='" + value + "' is not a job number");
}

// Digits alone (at most 9 of them), as a number.
std::optional<int> whole_number(const std::string& text) {
  if (text.empty() || text.size() > 9 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
    return std::nullopt;
  return std::stoi(text);
}

// This node's share of a Slurm step's tasks. SLURM_NTASKS_PER_NODE is set only with
// --ntasks-per-node, and is the job's; SLURM_STEP_TASKS_PER_NODE always, per node of the step
// ("4(x2),3": 4 on the first two, 3 on the third; SLURM_NODEID picks where they differ).
// The variable read, and its count; no variable: nullptr.
std::pair<const char*, int> slurm_tasks_on_this_node() {
  const char* name = "SLURM_STEP_TASKS_PER_NODE";
  const char* value = get(name);
  if (!value) {
    name = "SLURM_NTASKS_PER_NODE";
    return {get(name) ? name : nullptr, integer(name, 0)};
  }
  const std::string list = value;
  const auto malformed = [&] {
    return Error(std::string("environment variable ") + name + "='" + list +
                 "' is not a list of task counts such as 4(x2),3");
  };
  std::vector<std::pair<int, int>> runs;  // (count, nodes): "4(x2)" is 4 on each of 2 nodes
  for (size_t start = 0; start <= list.size();) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string part = list.substr(start, comma - start);
    const size_t paren = part.find("(x");
    const auto count = whole_number(part.substr(0, paren));
    const auto times = paren == std::string::npos ? std::optional<int>(1)
                       : part.back() == ')'       ? whole_number(part.substr(paren + 2, part.size() - paren - 3))
                                                  : std::nullopt;
    if (!count || !times || *times < 1) throw malformed();
    runs.emplace_back(*count, *times);
    start = comma + 1;
  }
  const bool uniform = std::all_of(runs.begin(), runs.end(), [&](const auto& run) { return run.first == runs[0].first; });
  if (uniform) return {name, runs[0].first};
  int node = integer("SLURM_NODEID", -1);
  for (const auto& [count, nodes] : runs) {
    if (node >= 0 && node < nodes) return {name, count};
    node -= nodes;
  }
  throw Error(std::string("environment variable ") + name + "='" + list +
              "' gives the nodes different task counts, and SLURM_NODEID does not say which node this is");
}

// The step's number, so that two steps of one job on a node (srun ... & srun ... &) get
// ports of their own; 0 where Slurm gives none.
unsigned long long step_id() {
  for (const char* name : {"SLURM_STEP_ID", "SLURM_STEPID"})
    if (const char* value = get(name)) {
      if (const auto number = whole_number(value)) return static_cast<unsigned long long>(*number);
    }
  return 0;
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list, const std::string& name) {
  const std::function<Error(std::string)> malformed = [&](const std::string& why) {
    return Error(name + " '" + list + "' is malformed: " + why);
  };
  std::vector<std::string> hosts;
  size_t pos = 0;
  while (true) {
    // One name up to a comma outside brackets: its text and bracketed values, every combination.
    std::vector<std::string> names{""};
    const size_t start = pos;
    while (pos < list.size() && list[pos] != ',') {
      if (list[pos] == ']') throw malformed("a ']' without its '['");
      if (list[pos] != '[') {
        for (auto& host : names) host += list[pos];
        ++pos;
        continue;
      }
      const size_t close = list.find(']', pos);
      if (close == std::string::npos) throw malformed("a '[' without its ']'");
      const auto inside = list.substr(pos + 1, close - pos - 1);
      if (inside.find('[') != std::string::npos) throw malformed("a '[' inside '[...]'");
      const auto values = bracket_values(inside, malformed);
      std::vector<std::string> longer;
      for (const auto& host : names)
        for (const auto& value : values) longer.push_back(host + value);
      names = std::move(longer);
      pos = close + 1;
    }
    if (pos == start) throw malformed(list.empty() ? "no host" : "an empty host name");
    hosts.insert(hosts.end(), names.begin(), names.end());
    if (pos == list.size()) return hosts;
    ++pos;  // the comma
  }
}

DistEnv read_env() {
  DistEnv env;
  Names names{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
  if (get("RANK") || get("WORLD_SIZE")) {
    // One without the other would quietly make rank 0 or a world of 1.
    if (!get("RANK") || !get("WORLD_SIZE")) {
      const std::string missing = get("RANK") ? "WORLD_SIZE" : "RANK", given = get("RANK") ? "RANK" : "WORLD_SIZE";
      throw Error(missing + " is not set (or is empty) while " + given +
                  " is: set both, as torchrun and fastcpp-launch do");
    }
    env.source = "torchrun";
  } else if (get("OMPI_COMM_WORLD_RANK")) {
    // Before Slurm's: mpirun in an allocation starts its daemons with srun, and their
    // SLURM_PROCID numbers nodes, not the program's processes.
    env.source = "openmpi";
    names = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
             "OMPI_COMM_WORLD_LOCAL_SIZE"};
  } else if (get("SLURM_PROCID") && get("SLURM_NTASKS") && !in_slurm_batch_shell()) {
    env.source = "slurm";
    names = {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE"};
  }
  if (env.source != "none") {
    env.rank = integer(names.rank, 0);
    env.world_size = integer(names.world_size, 1);
    if (env.source == "slurm") {
      const auto [name, count] = slurm_tasks_on_this_node();
      names.local_world_size = name ? name : "SLURM_STEP_TASKS_PER_NODE";
      env.local_world_size = name ? count : env.world_size;
    } else {
      env.local_world_size = integer(names.local_world_size, env.world_size);
    }
    // A node started by hand with RANK and no LOCAL_RANK: its place among the node's processes.
    const int local_world_size = std::max(env.local_world_size, 1);
    env.local_rank = integer(names.local_rank, env.source == "torchrun" ? env.rank % local_world_size : 0);
  }
  // Without a variable of its own, the node's size is the world's.
  const std::string local_size_name =
      env.source != "none" && get(names.local_world_size) ? names.local_world_size : names.world_size;
  if (env.world_size < 1)
    throw Error(std::string(names.world_size) + " must be >= 1, got " + std::to_string(env.world_size));
  if (env.rank < 0 || env.rank >= env.world_size)
    throw Error(std::string(names.rank) + " " + std::to_string(env.rank) + " is outside the world of " +
                std::to_string(env.world_size) + " processes (" + names.world_size + ")");
  if (env.local_world_size < 1)
    throw Error(local_size_name + " must be >= 1, got " + std::to_string(env.local_world_size));
  if (env.local_rank < 0 || env.local_rank >= env.local_world_size)
    throw Error(std::string(names.local_rank) + " " + std::to_string(env.local_rank) + " is outside the " +
                std::to_string(env.local_world_size) + " processes of this node (" + local_size_name + ")");

  const char* addr = get("MASTER_ADDR");
  if (env.source == "torchrun" && env.world_size > 1) {
    // Both launchers set them: without, the processes were started by hand, likely on several hosts.
    const auto size = std::to_string(env.world_size);
    if (!addr)
      throw Error("MASTER_ADDR is not set (WORLD_SIZE " + size +
                  "): set it on every process to the address of the host running rank 0");
    if (!get("MASTER_PORT"))
      throw Error("MASTER_PORT is not set (WORLD_SIZE " + size +
                  "): set it on every process to the port for rank 0's rendezvous store");
  }
  env.spans_nodes = spread_over_nodes(env, names);
  if (addr) {
    env.master_addr = addr;
  } else if (const auto& spread = env.spans_nodes; !spread.empty()) {
    // 127.0.0.1 would leave every other node waiting out its timeout.
    if (env.source != "slurm")
      throw Error("MASTER_ADDR is not set, and the run spans nodes (" + spread +
                  "): set it to the address of the host running rank 0");
    const char* list_name = get("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
    const char* list = get(list_name);
    if (!list)
      throw Error("MASTER_ADDR is not set, and the run spans nodes (" + spread +
                  ") with neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST to name the first: set MASTER_ADDR "
                  "to the address of the host running rank 0");
    // Slurm's default (block) distribution puts task 0 there, as PyTorch Lightning assumes.
    env.master_addr = expand_hostlist(list, list_name).front();
  }
  // Jobs that share a node each get a port of their own (the same on every node of a job).
  if (get("MASTER_PORT"))
    env.master_port = integer("MASTER_PORT", env.master_port);
  else if (env.source == "slurm" && get("SLURM_JOB_ID"))
    env.master_port = 10000 + static_cast<int>((job_id() + 7919 * step_id()) % 20000);
  env.restart_count = integer("TORCHELASTIC_RESTART_COUNT", 0);
  if (const char* agent = get("TORCHELASTIC_USE_AGENT_STORE")) env.agent_store = std::string(agent) == "True";
  if (env.master_port <= 0 || env.master_port > 65535)
    throw Error("MASTER_PORT " + std::to_string(env.master_port) + " is not a port number");
  return env;
}

}  // namespace fastcpp::distributed
