# A CUDA build of torch configures CUDA through the toolkit (nvcc and its headers), even
# for a project with no .cu file: point CMake at $CUDA_HOME's or /usr/local/cuda's nvcc.
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
  foreach(root $ENV{CUDA_HOME} /usr/local/cuda)
    if(EXISTS "${root}/bin/nvcc")
      set(CMAKE_CUDA_COMPILER "${root}/bin/nvcc")
      set(CUDAToolkit_ROOT "${root}")
      break()
    endif()
  endforeach()
endif()
