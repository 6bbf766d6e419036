// The Fashion-MNIST example on several processes: one line, learn.to_distributed(),
// makes it data-parallel (gradients all-reduced, BatchNorm synchronized, the data
// sharded, the metrics gathered over every shard). Launch it with
//
//   fastcpp-launch --nproc-per-node 2 ./distributed_fashion_mnist --epochs 2
//   .venv/bin/python -m torch.distributed.run --no_python --nproc_per_node 2 ./distributed_fashion_mnist
//   srun --ntasks 2 ./distributed_fashion_mnist   (with MASTER_ADDR/MASTER_PORT set)
//
// Run alone, it trains in one process. Each process uses --threads threads
// (default: the cores divided among the processes of this node).
#include <fastcpp.h>

#include <iostream>
#include <thread>

#include "fashion_model.h"

using namespace fastcpp;

int main(int argc, char** argv) {
  int epochs = 5, threads = 0;
  int64_t bs = 128;  // per process
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--epochs") epochs = std::stoi(argv[i + 1]);
    else if (flag == "--bs") bs = std::stoll(argv[i + 1]);
    else if (flag == "--threads") threads = std::stoi(argv[i + 1]);
  }
  try {
    const auto env = distributed::read_env();
    torch::set_num_threads(threads > 0 ? threads
                                       : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / env.local_world_size));
    torch::manual_seed(42);
    const std::string data = vision::fashion_mnist_dir();
    const std::vector<BatchTransform> tfms{Normalize{{0.2860}, {0.3530}}};
    DataLoaders dls{DataLoader(vision::idx_image_dataset(data, "train"), {.bs = bs, .shuffle = true, .seed = 42, .batch_tfms = tfms}),
                    DataLoader(vision::idx_image_dataset(data, "t10k"), {.bs = 2 * bs, .batch_tfms = tfms})};
    Learner learn(dls, make_model(), CrossEntropyLoss(), {metrics::accuracy()});
    learn.to_distributed();  // the one line
    learn.fit_one_cycle(epochs, 1e-2);
    if (env.rank == 0) std::printf("final test accuracy: %.4f\n", learn.recorder->values.back()[2]);
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
