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
  find_program(FASTCPP_PATH_NVCC nvcc)
  if(NOT CMAKE_CUDA_COMPILER AND NOT FASTCPP_PATH_NVCC)
    message(FATAL_ERROR "fastcpp needs the CUDA 13 toolkit's nvcc, even without a GPU (torch's CMake package "
                        "configures CUDA through it), and found none in $CUDA_HOME/bin, /usr/local/cuda/bin or "
                        "PATH: install NVIDIA's cuda-toolkit-13-0 package (from its CUDA apt repository) or set CUDA_HOME")
  endif()
endif()
