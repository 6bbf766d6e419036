// Precompiled for every target: the heavy libtorch headers.
#include <torch/torch.h>
