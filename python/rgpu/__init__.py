"""rgpu: run PyTorch on a remote GPU with a CPU-only torch.

    import torch, rgpu
    x = torch.ones(4, device="rgpu")
    print((x * 2).sum().item())   # 8.0, computed by rgpu-opserver

Importing rgpu adds the device "rgpu" (torch's PrivateUse1 backend, renamed): tensors on it live
on the machine that runs rgpu-opserver (RGPU_OPSERVER=host:port, default 127.0.0.1:9720, or
tls://host:port for one started with --tls, trusted through RGPU_TLS_FINGERPRINT or RGPU_TLS_CA;
token in RGPU_TOKEN). The connection opens at the first use of the device, not at import.

Where the pieces are found:
- the backend library: rgpu/_C*.so inside a package pip compiled (pip install ./python), or
  rgpu/librgpu_torch.so inside a wheel made from a CMake build (scripts/build_wheels.sh), else
  $RGPU_BUILD_DIR/lib/librgpu_torch.so, else build/lib/librgpu_torch.so of the source tree this
  file sits in (CMake build);
- lib_dir(): see its docstring; `python -m rgpu.shim` prints it.

rgpu.__version__ is the release, from the one VERSION file (rgpu/VERSION installed, the source
tree's VERSION otherwise), which every program's --version prints too.
"""
import glob
import os
import warnings

try:
    import torch
except ImportError:  # rgpu-run and lib_dir() need no torch; only the device does
    torch = None

__all__ = ["__version__", "lib_dir", "server_info", "stats", "synchronize"]

_HERE = os.path.dirname(os.path.abspath(__file__))
# python/rgpu/__init__.py -> the repository root, when run from the source tree.
_REPO = os.path.dirname(os.path.dirname(_HERE))


def _read_version():
    # rgpu/run.py reads the same two files itself: it also runs as a plain script.
    for path in (os.path.join(_HERE, "VERSION"), os.path.join(_REPO, "VERSION")):
        if os.path.exists(path):
            with open(path) as f:
                return f.read().strip()
    return "unknown"


__version__ = _read_version()


def _build_dir():
    """The CMake build directory: $RGPU_BUILD_DIR, else build/ of the source tree this package
    sits in, else None (an installed package outside a source tree)."""
    if os.environ.get("RGPU_BUILD_DIR"):
        return os.environ["RGPU_BUILD_DIR"]
    if os.path.exists(os.path.join(_REPO, "CMakeLists.txt")):
        return os.path.join(_REPO, "build")
    return None


def lib_dir():
    """The directory holding rgpu's driver shim libraries (libcuda.so.1, libnvidia-ml.so.1).

    An installed package carries a copy in rgpu/lib when the CMake build had made the shims before
    pip ran (setup.py copies them); otherwise it is the CMake build's lib directory:
    $RGPU_BUILD_DIR/lib, or build/lib of the source tree this package sits in. Raises
    FileNotFoundError when there is neither.
    """
    packaged = os.path.join(_HERE, "lib")
    if os.path.exists(os.path.join(packaged, "libcuda.so.1")):
        return packaged
    build = _build_dir()
    if build is None:
        raise FileNotFoundError(
            "rgpu: this installed package carries no driver shims (rgpu/lib); build rgpu with CMake and set "
            "RGPU_BUILD_DIR to that build directory, or reinstall with pip after building")
    return os.path.join(build, "lib")


def _backend_library():
    for path in sorted(glob.glob(os.path.join(_HERE, "_C*.so"))) + [os.path.join(_HERE, "librgpu_torch.so")]:
        if os.path.exists(path):
            return path
    path = os.path.join(_build_dir() or "build", "lib", "librgpu_torch.so")
    if os.path.exists(path):
        return path
    raise ImportError(
        "rgpu: the backend library is missing: neither rgpu/_C*.so (pip install ./python builds it), "
        "rgpu/librgpu_torch.so (a wheel from scripts/build_wheels.sh) nor "
        f"{path} (the CMake build makes it; set RGPU_BUILD_DIR to another build directory) exists")


def _print_from_one_copy():
    """Printing formats a tensor's values with many small ops (abs, max, masked_select, item...):
    on an rgpu tensor each one waits for the server, about 90 round trips for 100x100. The values
    are formatted from one cpu copy instead (one wait); huge tensors, which print only their
    edges, keep torch's way rather than copying everything."""
    import torch._tensor_str as tensor_str

    original = tensor_str._tensor_str

    def _tensor_str(self, indent):
        if self.device.type == "rgpu" and self.numel() <= (1 << 22):
            self = self.cpu()
        return original(self, indent)

    tensor_str._tensor_str = _tensor_str


LOCAL_CUDA_WARNING = (
    "rgpu: this process also uses local CUDA. Once rgpu is imported, torch takes rgpu (its PrivateUse1 "
    "backend) for the process's accelerator, and every backward over local cuda tensors fails in the autograd "
    "engine with 'opt_ready_stream && opt_parent_stream INTERNAL ASSERT FAILED' (a PyTorch bug, "
    "pytorch/pytorch#161129; torch has no switch that keeps cuda the accelerator). Forward passes and copies on "
    "local cuda still work, and rgpu is not affected; run training on local cuda in a process that does not "
    "import rgpu (a subprocess)")


def _warn_about_local_cuda():
    """Warns once, when local CUDA is initialised in this process (at once if it already is):
    torch.cuda runs its queued calls then. A torch without CUDA, or a process that never uses it,
    never warns."""
    def warn():
        warnings.warn(LOCAL_CUDA_WARNING, RuntimeWarning, stacklevel=2)

    try:
        torch.cuda._lazy_call(warn)
    except Exception:  # noqa: BLE001  (a torch without the private hook: no warning rather than no rgpu)
        pass


def _register():
    """Adds the device to torch (at import, when torch is installed)."""
    global synchronize, server_info, stats
    torch.utils.rename_privateuse1_backend("rgpu")
    torch.ops.load_library(_backend_library())

    from . import device as _device

    torch._register_device_module("rgpu", _device)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)
    _print_from_one_copy()
    from . import compile as _compile

    _compile.register()
    from . import checkpoint as _checkpoint

    _checkpoint.register()
    _warn_about_local_cuda()
    synchronize = _device.synchronize
    server_info = _device.server_info
    stats = _device.stats


if torch is not None:
    _register()
