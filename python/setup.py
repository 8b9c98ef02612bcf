"""Builds rgpu._C, the PyTorch backend (rgpu/csrc plus the shared C++ of common/ and protocol/),
against the installed torch, and ships the C++ programs the CMake build made, when there are any:
build/bin/rgpu-opserver into rgpu/bin, the driver shims build/lib/libcuda.so.1 and
libnvidia-ml.so.1 into rgpu/lib (RGPU_BUILD_DIR picks another build directory). Without them the
rgpu-opserver command and rgpu.lib_dir() use the build directory of the source tree."""
import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.environ.get("RGPU_BUILD_DIR") or os.path.join(ROOT, "build")

try:
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError as e:
    raise SystemExit("rgpu builds its PyTorch backend against the installed torch, and none is importable here "
                     f"({e}); install torch first (pip install torch), then pip install ./python") from e

SOURCES = sorted(glob.glob(os.path.join(HERE, "rgpu", "csrc", "*", "*.cpp"))) + [
    os.path.join(ROOT, "common", f) for f in ("log.cpp", "env.cpp", "net.cpp", "crypto.cpp", "spin_policy.cpp")
] + [os.path.join(ROOT, "protocol", f) for f in ("frame.cpp", "handshake.cpp", "transport.cpp", "channel.cpp",
                                              "client_session.cpp", "drain.cpp", "tls.cpp")]
# setuptools wants paths relative to this directory.
SOURCES = [os.path.relpath(p, HERE) for p in SOURCES]


class BuildPyWithPrograms(build_py):
    """Copies the CMake-built programs into the package, when they exist."""

    def run(self):
        super().run()
        pkg = os.path.join(self.build_lib, "rgpu")
        for sub, names in (("bin", ["rgpu-opserver"]), ("lib", ["libcuda.so.1", "libnvidia-ml.so.1"])):
            # All of a library's names or none, so lib_dir() never points at half a set.
            if sub == "lib" and not all(os.path.exists(os.path.join(BUILD, sub, n)) for n in names):
                continue
            for name in names:
                src = os.path.join(BUILD, sub, name)
                if os.path.exists(src):
                    os.makedirs(os.path.join(pkg, sub), exist_ok=True)
                    shutil.copy2(src, os.path.join(pkg, sub, name))


setup(
    ext_modules=[
        CppExtension(
            "rgpu._C",
            SOURCES,
            include_dirs=[ROOT, os.path.join(HERE, "rgpu", "csrc")],
            libraries=["ssl", "crypto"],
            extra_compile_args=["-std=c++20", "-O2"],
        )
    ],
    cmdclass={"build_ext": BuildExtension, "build_py": BuildPyWithPrograms},
)
