"""The rgpu-opserver command: runs the C++ server shipped in the package (rgpu/bin) or built in the
source tree ($RGPU_BUILD_DIR/bin, by default build/bin). Arguments pass through unchanged."""
import os
import sys

from . import _build_dir, _HERE


def binary():
    build = _build_dir()
    candidates = [os.path.join(_HERE, "bin", "rgpu-opserver")]
    if build:
        candidates.append(os.path.join(build, "bin", "rgpu-opserver"))
    for path in candidates:
        if os.access(path, os.X_OK):
            return path
    return None


def main():
    path = binary()
    if path is None:
        where = f"{_build_dir()}/bin" if _build_dir() else "no build directory: RGPU_BUILD_DIR is not set"
        sys.stderr.write(
            f"rgpu-opserver: the server binary is neither in this package (rgpu/bin) nor in the CMake build ({where}); "
            "build it with CMake against torch (-DRGPU_TORCH_PYTHON=python-with-torch) and set RGPU_BUILD_DIR, or "
            "reinstall with pip after building\n")
        return 2
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
