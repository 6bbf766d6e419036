// The test runner. The gpu suite needs a CUDA device: asked for alone (as ctest does)
// on a machine without one, it says "skipped: no CUDA device" and exits with 77, which
// ctest counts as skipped, never as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <torch/cuda.h>

#include <iostream>
#include <string>

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--test-suite=gpu" && !torch::cuda::is_available()) {
      std::cout << "gpu: skipped: no CUDA device" << std::endl;
      return 77;
    }
  doctest::Context context(argc, argv);
  return context.run();
}
