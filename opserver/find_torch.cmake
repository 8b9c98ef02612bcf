# Finds torch's CMake package for the PyTorch device (opserver/ and python/rgpu/csrc), through the
# Python that has torch installed: RGPU_TORCH_PYTHON (default: python3 on PATH; scripts give the
# repo's .venv). Sets Torch_FOUND; without torch the rest of rgpu builds as before, and says so.
set(RGPU_TORCH_PYTHON python3 CACHE STRING "Python interpreter whose torch the PyTorch device builds against")
execute_process(COMMAND ${RGPU_TORCH_PYTHON} -c "import torch; print(torch.utils.cmake_prefix_path)"
  OUTPUT_VARIABLE _rgpu_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rgpu_torch_rc)
if(_rgpu_torch_rc EQUAL 0 AND _rgpu_torch_prefix)
  list(APPEND CMAKE_PREFIX_PATH ${_rgpu_torch_prefix})
  # Torch's package looks for CUDA when torch was built with it, and probes the GPUs unless
  # told which architectures to build for; nothing here compiles CUDA code, so skip the probe.
  if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")
  endif()
  find_package(Torch QUIET)
endif()
if(Torch_FOUND)
  message(STATUS "PyTorch device: building rgpu-opserver and the rgpu torch backend against torch in ${_rgpu_torch_prefix}")
else()
  message(STATUS "PyTorch device: skipped (no torch importable by ${RGPU_TORCH_PYTHON}; set -DRGPU_TORCH_PYTHON=/path/to/python with torch)")
endif()
