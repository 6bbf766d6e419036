#pragma once
// Where this process stands in a distributed run, read from the environment that
// launchers set: torchrun and fastcpp-launch (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT), Slurm
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE) or Open MPI
// (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE). With none of them: a
// single process (rank 0 of 1).
#include <string>

namespace fastcpp::distributed {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int restart_count = 0;
  bool agent_store = false;     // torchrun's agent already serves the store (TORCHELASTIC_USE_AGENT_STORE)
  std::string source = "none";  // which launcher's variables were read

  // Started by torchrun or fastcpp-launch: a distributed run, even of one process
  // (PyTorch's DDP all-reduces at a world of 1 too). Slurm and Open MPI set their
  // variables in every job, so one task of theirs trains alone (no group on the node's
  // shared default port). Whether there are peers is world_size > 1.
  bool is_distributed() const { return source == "torchrun" || world_size > 1; }
};

// Throws fastcpp::Error naming the variable when a value is malformed or
// inconsistent (a rank outside the world, a world size below 1).
DistEnv read_env();

}  // namespace fastcpp::distributed
