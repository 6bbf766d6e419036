#pragma once
// Where this process stands in a distributed run, read from the environment that
// launchers set: torchrun and fastcpp-launch (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT), Slurm
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE) or Open MPI
// (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE). With none of them: a
// single process (rank 0 of 1).
//
// RANK and WORLD_SIZE come together, and with more than one process so do MASTER_ADDR
// and MASTER_PORT (both launchers set all four). Slurm and Open MPI set no master: on one
// node it is 127.0.0.1 unless MASTER_ADDR says otherwise; a Slurm run over several nodes
// meets at the first host of SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST), where Slurm puts
// task 0; an Open MPI run over several nodes needs MASTER_ADDR. The port is MASTER_PORT,
// else 29500, or under Slurm 10000 + SLURM_JOB_ID mod 20000, so that jobs sharing a node
// do not meet at one port.
//
// Slurm's variables count as a launcher's only in a task that srun started (SLURM_STEP_ID
// set): a batch script's own shell has SLURM_PROCID 0 and SLURM_NTASKS of the whole job,
// and a program started there without srun is one process (it says so on stderr once).
#include <string>
#include <vector>

namespace fastcpp::distributed {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // This node's count only: torchrun's agents count their own restarts, so nodes can differ.
  int restart_count = 0;
  bool agent_store = false;     // torchrun's agent already serves the store (TORCHELASTIC_USE_AGENT_STORE)
  std::string source = "none";  // which launcher's variables were read
  // What shows that the processes are on several nodes ("SLURM_JOB_NUM_NODES 2"); empty
  // when they are on one, or nothing says.
  std::string spans_nodes;

  // Started by torchrun or fastcpp-launch: a distributed run, even of one process
  // (PyTorch's DDP all-reduces at a world of 1 too). Slurm and Open MPI set their
  // variables in every job, so one task of theirs trains alone (no group on the node's
  // shared default port). Whether there are peers is world_size > 1.
  bool is_distributed() const { return source == "torchrun" || world_size > 1; }
};

// Throws fastcpp::Error naming the variable when a value is malformed, missing or
// inconsistent (a rank outside the world, a world size below 1).
DistEnv read_env();

// The hosts of a Slurm host list, in order: "node[01-03,07],gpu5" is node01, node02,
// node03, node07 and gpu5 (a range keeps its first number's zero padding, as Slurm's).
// A malformed list is an Error naming `name` (the variable it came from) and the fault.
std::vector<std::string> expand_hostlist(const std::string& list, const std::string& name = "host list");

}  // namespace fastcpp::distributed
