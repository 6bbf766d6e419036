#pragma once
// CIFAR-10 and CIFAR-100 binary batches (the "binary version" files): per image a
// label byte (CIFAR-100: coarse then fine label) and 3072 bytes of 32x32 R, G, B planes.
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace fastcpp::vision {

enum class Cifar { ten, hundred };

// x uint8 [N, 3, 32, 32], y int64 [N] (CIFAR-100: the fine label). train: data_batch_1..5.bin
// (CIFAR-10) or train.bin (CIFAR-100); otherwise test_batch.bin / test.bin.
std::shared_ptr<TensorDataset> cifar_dataset(const std::string& dir, bool train, Cifar kind = Cifar::ten);
// One batch file.
std::shared_ptr<TensorDataset> read_cifar_file(const std::string& path, Cifar kind = Cifar::ten);
// Class names from batches.meta.txt / fine_label_names.txt, or "0".."n-1" if absent.
std::vector<std::string> cifar_vocab(const std::string& dir, Cifar kind = Cifar::ten);

}  // namespace fastcpp::vision
