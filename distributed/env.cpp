#include "distributed/env.h"

#include <cstdlib>
#include <string>

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

}  // namespace

DistEnv read_env() {
  DistEnv env;
  if (get("RANK") || get("WORLD_SIZE")) {
    env.source = "torchrun";
    env.rank = integer("RANK", 0);
    env.world_size = integer("WORLD_SIZE", 1);
    env.local_rank = integer("LOCAL_RANK", env.rank);
    env.local_world_size = integer("LOCAL_WORLD_SIZE", env.world_size);
  } else if (get("SLURM_PROCID") && get("SLURM_NTASKS")) {
    env.source = "slurm";
    env.rank = integer("SLURM_PROCID", 0);
    env.world_size = integer("SLURM_NTASKS", 1);
    env.local_rank = integer("SLURM_LOCALID", 0);
    env.local_world_size = integer("SLURM_NTASKS_PER_NODE", env.world_size);
  } else if (get("OMPI_COMM_WORLD_RANK")) {
    env.source = "openmpi";
    env.rank = integer("OMPI_COMM_WORLD_RANK", 0);
    env.world_size = integer("OMPI_COMM_WORLD_SIZE", 1);
    env.local_rank = integer("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    env.local_world_size = integer("OMPI_COMM_WORLD_LOCAL_SIZE", env.world_size);
  }
  if (const char* addr = get("MASTER_ADDR")) env.master_addr = addr;
  env.master_port = integer("MASTER_PORT", env.master_port);
  env.restart_count = integer("TORCHELASTIC_RESTART_COUNT", 0);
  if (const char* agent = get("TORCHELASTIC_USE_AGENT_STORE")) env.agent_store = std::string(agent) == "True";
  if (env.world_size < 1) throw Error("WORLD_SIZE must be >= 1, got " + std::to_string(env.world_size));
  if (env.rank < 0 || env.rank >= env.world_size)
    throw Error("RANK " + std::to_string(env.rank) + " is outside the world of " + std::to_string(env.world_size) +
                " processes (" + env.source + " variables)");
  if (env.local_rank < 0 || env.local_rank >= env.local_world_size)
    throw Error("LOCAL_RANK " + std::to_string(env.local_rank) + " is outside the " +
                std::to_string(env.local_world_size) + " processes of this node");
  if (env.master_port <= 0 || env.master_port > 65535)
    throw Error("MASTER_PORT " + std::to_string(env.master_port) + " is not a port number");
  return env;
}

}  // namespace fastcpp::distributed
