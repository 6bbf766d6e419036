// The Fashion-MNIST example on several processes: one line, learn.to_distributed(),
// makes it data-parallel (gradients all-reduced, BatchNorm synchronized, the data
// sharded, the metrics gathered over every shard). Launch it with
//
//   fastcpp-launch --nproc-per-node 2 ./distributed_fashion_mnist --epochs 2
//   .venv/bin/python -m torch.distributed.run --no_python --nproc_per_node 2 ./distributed_fashion_mnist
//   srun --ntasks 2 ./distributed_fashion_mnist   (on several nodes, they meet at the first one)
//
// Run alone, it trains in one process. Each process uses --threads threads
// (default: the cores divided among the processes of this node).
#include <fastcpp.h>

#include <iostream>

#include "fashion_model.h"

using namespace fastcpp;

int main(int argc, char** argv) {
  int epochs = 5, threads = 0;
  int64_t bs = 128;  // per process
  std::string data = vision::fashion_mnist_dir();
  CommandLine cli("distributed_fashion_mnist",
                  "The Fashion-MNIST example on several processes through learn.to_distributed(); start it with "
                  "fastcpp-launch, torchrun or srun (alone, it trains in one process).");
  cli.flag("--epochs", epochs, "epochs to train").range(0, 100000);
  cli.flag("--bs", bs, "batch size per process").range(1, 1 << 20);
  cli.flag("--threads", threads, "CPU threads per process (0: the cores divided among this node's processes)")
      .range(0, 4096);
  cli.flag("--data", data, "the folder of Fashion-MNIST's idx files");
  cli.example("fastcpp-launch --nproc-per-node 2 distributed_fashion_mnist --epochs 2");
  cli.parse(argc, argv);
  try {
    const auto env = distributed::read_env();
    torch::set_num_threads(threads > 0 ? threads : cores_per_process(env.local_world_size));
    torch::manual_seed(42);
    const std::vector<BatchTransform> tfms{Normalize{{0.2860}, {0.3530}}};
    DataLoaders dls{DataLoader(vision::idx_image_dataset(data, "train"), {.bs = bs, .shuffle = true, .seed = 42, .batch_tfms = tfms}),
                    DataLoader(vision::idx_image_dataset(data, "t10k"), {.bs = 2 * bs, .batch_tfms = tfms})};
    Learner learn(dls, make_model(), CrossEntropyLoss(), {metrics::accuracy()});
    learn.to_distributed();  // the one line
    learn.fit_one_cycle(epochs, 1e-2);
    auto results = learn.recorder->valid_values();  // [valid_loss, accuracy] of the last epoch
    if (results.size() < 2) results = learn.validate();  // --epochs 0
    if (env.rank == 0) std::printf("final test accuracy: %.4f\n", results[1]);
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
