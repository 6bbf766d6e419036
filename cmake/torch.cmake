# libtorch for fastcpp: PyTorch's own (the CMake package inside the torch wheel), found
# through a Python that has torch: FASTCPP_PYTHON, by default the project's .venv that
# scripts/setup_python.sh makes. Also decides what of CUDA, cuDNN, NCCL and Gloo is on,
# sets FASTCPP_CUDA/CUDNN/NCCL/GLOO to a word for the configure summary, and defines
# fastcpp_use_torch(target).

set(FASTCPP_PYTHON "${CMAKE_CURRENT_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "The Python whose torch package fastcpp builds on (and that runs the tests' Python side)")

function(fastcpp_python_path out code)
  execute_process(COMMAND "${FASTCPP_PYTHON}" -c "${code}" OUTPUT_VARIABLE value RESULT_VARIABLE rc
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0)
    set(${out} "${value}" PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

if(NOT Torch_DIR)
  fastcpp_python_path(torch_prefix "import torch; print(torch.utils.cmake_prefix_path)")
  if(NOT torch_prefix)
    message(FATAL_ERROR "fastcpp: ${FASTCPP_PYTHON} cannot import torch. Run scripts/setup_python.sh "
                        "(the project's .venv), or pass -DFASTCPP_PYTHON=<a python with torch>, or -DTorch_DIR=...")
  endif()
  list(APPEND CMAKE_PREFIX_PATH "${torch_prefix}")
endif()

include(${CMAKE_CURRENT_LIST_DIR}/nvcc.cmake)

find_package(Torch REQUIRED)

set(FASTCPP_CUDA off)
set(FASTCPP_CUDNN off)
set(FASTCPP_NCCL off)
set(FASTCPP_GLOO off)
set(fastcpp_torch_definitions "")
set(fastcpp_torch_includes "")

if(TARGET torch_cuda)
  set(FASTCPP_CUDA "on (${CUDAToolkit_VERSION})")
  list(APPEND fastcpp_torch_definitions FASTCPP_HAS_CUDA=1)
  # torch's CMake config leaves cuDNN to libtorch_cuda (it comes with the wheel): ask torch.
  fastcpp_python_path(cudnn_version "import torch; print(torch.backends.cudnn.version() or '')")
  if(cudnn_version)
    set(FASTCPP_CUDNN "on (${cudnn_version})")
  endif()
  # c10d's NCCL backend: torch_cuda carries USE_C10D_NCCL; its header includes nccl.h,
  # which must be the NCCL torch was built with (its Options embed ncclConfig_t).
  get_target_property(cuda_definitions torch_cuda INTERFACE_COMPILE_DEFINITIONS)
  if("USE_C10D_NCCL" IN_LIST cuda_definitions)
    fastcpp_python_path(nccl_wheel "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'include'))")
    find_path(FASTCPP_NCCL_INCLUDE_DIR nccl.h HINTS ${nccl_wheel} ${CUDAToolkit_INCLUDE_DIRS})
    if(FASTCPP_NCCL_INCLUDE_DIR)
      file(STRINGS "${FASTCPP_NCCL_INCLUDE_DIR}/nccl.h" nccl_version REGEX "#define NCCL_(MAJOR|MINOR|PATCH) ")
      string(REGEX REPLACE "[^0-9;]" "" nccl_version "${nccl_version}")
      string(REPLACE ";" "." nccl_version "${nccl_version}")
      set(FASTCPP_NCCL "on (${nccl_version})")
      list(APPEND fastcpp_torch_definitions FASTCPP_HAS_NCCL=1)
      list(APPEND fastcpp_torch_includes "${FASTCPP_NCCL_INCLUDE_DIR}")
    endif()
  endif()
endif()

# c10d's Gloo backend: torch has Gloo built in, but the wheel ships no Gloo headers, which
# ProcessGroupGloo.hpp includes. Debian's libgloo-dev headers serve (only its headers:
# never link its library beside torch's); FASTCPP_GLOO_DIR names another folder.
find_path(FASTCPP_GLOO_INCLUDE_DIR gloo/algorithm.h HINTS ${FASTCPP_GLOO_DIR} $ENV{FASTCPP_GLOO_DIR})
if(FASTCPP_GLOO_INCLUDE_DIR)
  set(FASTCPP_GLOO on)
  list(APPEND fastcpp_torch_definitions FASTCPP_HAS_GLOO=1)
  if(NOT FASTCPP_GLOO_INCLUDE_DIR STREQUAL "/usr/include")
    list(APPEND fastcpp_torch_includes "${FASTCPP_GLOO_INCLUDE_DIR}")
  endif()
endif()

function(fastcpp_use_torch target)
  # libstdc++ first among the shared libraries: libtorch.so exports std::filesystem
  # functions of its own (bound first otherwise, they crash in our code).
  # Installed, the package links the consumer's own torch target (fastcppConfig.cmake finds it).
  target_link_libraries(${target} PUBLIC "-Wl,--push-state,--no-as-needed" stdc++ "-Wl,--pop-state"
                        "$<BUILD_INTERFACE:${TORCH_LIBRARIES}>" "$<INSTALL_INTERFACE:torch>")
  target_compile_definitions(${target} PUBLIC ${fastcpp_torch_definitions})
  # NCCL's and Gloo's headers are for c10d's backends inside the library only.
  target_include_directories(${target} SYSTEM PRIVATE ${fastcpp_torch_includes})
endfunction()
