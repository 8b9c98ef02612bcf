"""`python -m rgpu.shim` prints the folder holding rgpu's driver shims (libcuda.so.1 and
libnvidia-ml.so.1, rgpu.lib_dir()), to put first on LD_LIBRARY_PATH so that an unmodified CUDA
program loads them instead of NVIDIA's driver:

    LD_LIBRARY_PATH=$(python -m rgpu.shim) RGPU_SERVER=gpu-host:9713 ./my_cuda_program

It exits 1, saying why, where there is no such folder.
"""
import sys

from . import lib_dir


def main() -> int:
    try:
        print(lib_dir())
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
