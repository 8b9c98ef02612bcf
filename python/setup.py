"""Builds the rgpu package: the Python modules, the PyTorch backend, and the C++ programs and driver
shims of a CMake build, in one of two ways.

From source (pip install ./python): compiles rgpu._C, the PyTorch backend (rgpu/csrc plus the
shared C++ of common/ and protocol/), against the installed torch, and copies whatever programs and
shims the CMake build made ($RGPU_BUILD_DIR, default build/) into the package, debug info
stripped.

Prebuilt (RGPU_PREBUILT=<CMake build dir>, what scripts/build_wheels.sh uses): compiles nothing.
It packages that build's outputs, debug info stripped: the backend lib/librgpu_torch.so
(the same sources, built by CMake), the programs into rgpu/bin, the shims and the fake driver into
rgpu/lib. The build must have every one of them, and the wheel then requires the torch release it
was built against (torch==X.Y.*: libtorch's C++ ABI changes between releases).

Either way the version is the repository's VERSION file, shipped as rgpu/VERSION.
"""
import glob
import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PREBUILT = os.environ.get("RGPU_PREBUILT")
BUILD = PREBUILT or os.environ.get("RGPU_BUILD_DIR") or os.path.join(ROOT, "build")
with open(os.path.join(ROOT, "VERSION")) as f:
    VERSION = f.read().strip()

# What goes into the package from the CMake build: (folder in the build and in the package, names).
# rgpu-doctor is there when the build has it (tools/, a newer checkout). The fake driver and NVML
# sit beside the shims because rgpu-server --driver fake loads them from its ../lib.
PROGRAMS = ["rgpu-server", "rgpu-smi", "rgpu-opserver", "rgpu-doctor"]
OPTIONAL_PROGRAMS = {"rgpu-doctor"}
SHIMS = ["libcuda.so.1", "libnvidia-ml.so.1"]
FAKE_DRIVER = ["libfakecuda.so", "libfakenvml.so"]
# rgpu's NCCL (forwards the NCCL API to the server; rgpu-run --shim preloads it) and the fake one
# rgpu-server --driver fake loads: sets of their own, so that a build without them still ships the rest.
NCCL = ["libnccl.so.2"]
FAKE_NCCL = ["libfakenccl.so"]
BACKEND = "librgpu_torch.so"


def _try_import_torch():
    try:
        import torch
        return torch, None
    except ImportError as e:
        return None, e


def _missing_torch_message(e):
    return ("rgpu builds its PyTorch backend against the installed torch, and none is importable here "
            f"({e}). Install torch first; a client needs only the CPU build: "
            "pip install torch --index-url https://download.pytorch.org/whl/cpu , then pip install ./python")


def _copy_program(src, dst):
    shutil.copy2(src, dst)
    # Debug info is most of a RelWithDebInfo binary (rgpu-server: 27 MB); the package ships
    # without it. strip is binutils', beside the compiler that built the files.
    if shutil.which("strip"):
        subprocess.run(["strip", "--strip-debug", dst], check=True)


def _shipped_programs():
    """The programs of PROGRAMS the build made."""
    return [p for p in PROGRAMS if os.path.exists(os.path.join(BUILD, "bin", p))]


class BuildPyWithPrograms(build_py):
    """Adds the VERSION file and the CMake-built programs and shims to the package."""

    def run(self):
        super().run()
        pkg = os.path.join(self.build_lib, "rgpu")
        shutil.copy2(os.path.join(ROOT, "VERSION"), os.path.join(pkg, "VERSION"))
        os.makedirs(os.path.join(pkg, "bin"), exist_ok=True)
        for name in _shipped_programs():
            _copy_program(os.path.join(BUILD, "bin", name), os.path.join(pkg, "bin", name))
        # All of a set of libraries or none, so lib_dir() never points at half a set.
        for names in (SHIMS, FAKE_DRIVER, NCCL, FAKE_NCCL):
            if all(os.path.exists(os.path.join(BUILD, "lib", n)) for n in names):
                os.makedirs(os.path.join(pkg, "lib"), exist_ok=True)
                for name in names:
                    _copy_program(os.path.join(BUILD, "lib", name), os.path.join(pkg, "lib", name))
        if PREBUILT:
            _copy_program(os.path.join(BUILD, "lib", BACKEND), os.path.join(pkg, BACKEND))


class BinaryDistribution(Distribution):
    """The prebuilt package has no extension module for setuptools to see, but is as tied to one
    platform and one Python as one (the programs link libpython): a platform wheel, cpXY-cpXY."""

    def has_ext_modules(self):
        return True


def _console_scripts():
    # The C++ programs run through rgpu_launcher (a module apart from the rgpu package, whose import
    # loads torch and the device: rgpu-smi and rgpu-server start without either).
    scripts = ["rgpu-run = rgpu.run:main"]
    for name in PROGRAMS:
        if name not in OPTIONAL_PROGRAMS or name in _shipped_programs():
            scripts.append(f"{name} = rgpu_launcher:{name.replace('rgpu-', '').replace('-', '_')}")
    return scripts


def _prebuilt_arguments():
    missing = [os.path.join(BUILD, sub, n)
               for sub, names in (("bin", [p for p in PROGRAMS if p not in OPTIONAL_PROGRAMS]),
                                  ("lib", SHIMS + FAKE_DRIVER + NCCL + FAKE_NCCL + [BACKEND]))
               for n in names if not os.path.exists(os.path.join(BUILD, sub, n))]
    if missing:
        raise SystemExit(f"RGPU_PREBUILT={BUILD}: the build lacks {', '.join(missing)}; build them first "
                         "(scripts/build_wheels.sh does, or cmake --build with -DRGPU_TORCH_PYTHON=<python with torch>)")
    torch, e = _try_import_torch()
    if torch is None:
        raise SystemExit(_missing_torch_message(e))
    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    return {"install_requires": [f"torch=={release}.*"], "distclass": BinaryDistribution}


def _nettle():
    """Nettle's header directory and library, or None."""
    include = next((d for d in ("/usr/include", "/usr/local/include")
                    if os.path.exists(os.path.join(d, "nettle", "gcm.h"))), None)
    # libnettle.so comes with the headers; where only the runtime library is installed, its soname.
    lib = next((p for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
                for p in (os.path.join(d, "libnettle.so"), os.path.join(d, "libnettle.so.8")) if os.path.exists(p)),
               None)
    return (include, lib) if include and lib else None


def _source_arguments():
    torch, e = _try_import_torch()
    if torch is None:
        raise SystemExit(_missing_torch_message(e))
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    sources = sorted(glob.glob(os.path.join(HERE, "rgpu", "csrc", "*", "*.cpp"))) + [
        os.path.join(ROOT, "common", f) for f in ("log.cpp", "env.cpp", "net.cpp", "crypto.cpp", "spin_policy.cpp")
    ] + [os.path.join(ROOT, "protocol", f) for f in ("frame.cpp", "handshake.cpp", "transport.cpp", "channel.cpp",
                                                  "client_session.cpp", "drain.cpp", "tls.cpp",
                                                  "tls_records.cpp")]
    # Nettle seals small TLS records faster than OpenSSL (protocol/tls_records.cpp), where its
    # headers are installed (nettle-dev); without them every record goes through OpenSSL.
    nettle = _nettle()
    return {
        "install_requires": ["torch"],
        "ext_modules": [
            CppExtension(
                "rgpu._C",
                # setuptools wants paths relative to this directory.
                [os.path.relpath(p, HERE) for p in sources],
                include_dirs=[ROOT, os.path.join(HERE, "rgpu", "csrc")] + ([nettle[0]] if nettle else []),
                libraries=["ssl", "crypto"],
                extra_objects=[nettle[1]] if nettle else [],
                define_macros=[("RGPU_HAVE_NETTLE", "1")] if nettle else [],
                extra_compile_args=["-std=c++20", "-O2"],
            )
        ],
        "cmdclass": {"build_ext": BuildExtension},
    }


arguments = _prebuilt_arguments() if PREBUILT else _source_arguments()
arguments.setdefault("cmdclass", {})["build_py"] = BuildPyWithPrograms
setup(
    version=VERSION,
    entry_points={"console_scripts": _console_scripts()},
    **arguments,
)
