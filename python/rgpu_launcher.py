"""The console scripts of rgpu's C++ programs: rgpu-server, rgpu-smi, rgpu-opserver, rgpu-doctor.

Each finds its program in the installed package (rgpu/bin) or, run from a source tree, in the
CMake build ($RGPU_BUILD_DIR/bin, default build/bin of the tree), and runs it in place of this
process (exec) with the arguments unchanged, so signals and the exit status are the program's.

This is a module apart from the rgpu package on purpose: importing rgpu imports torch and loads
the PyTorch device, which rgpu-server and rgpu-smi need not wait for (nor need torch at all). It
finds the package with importlib without running it.

rgpu-opserver links libtorch and libpython. The loader is pointed at the torch this Python imports
(its torch/lib, wherever pip put it: the venv's site-packages or one that a .pth file adds) and at
this Python's libpython folder, and the server's Inductor runs in this Python's environment
(RGPU_OPSERVER_PYTHON, unless set): the installed program uses the torch of the venv it is
installed in, not the one of the machine that built it.
"""
import importlib.util
import os
import sys
import sysconfig


def _package_dir():
    spec = importlib.util.find_spec("rgpu")
    return spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else None


def _candidates(name):
    """Where the program may be: in the package, then in the CMake build."""
    package = _package_dir()
    paths = [os.path.join(package, "bin", name)] if package else []
    build = os.environ.get("RGPU_BUILD_DIR")
    if not build and package:
        repo = os.path.dirname(os.path.dirname(package))  # python/rgpu -> the repository
        if os.path.exists(os.path.join(repo, "CMakeLists.txt")):
            build = os.path.join(repo, "build")
    if build:
        paths.append(os.path.join(build, "bin", name))
    return paths


def _torch_environment(env):
    """Puts this Python's torch/lib and libpython folder first on LD_LIBRARY_PATH, and names this
    Python for the server's Inductor. Without torch, says so and exits."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        sys.stderr.write(
            f"rgpu-opserver: {sys.executable} has no torch; the server runs PyTorch's operators with the torch "
            "of the Python rgpu is installed in. Install into it the torch release rgpu was built against "
            "(pip show rgpu names it under Requires)\n")
        sys.exit(2)
    dirs = [os.path.join(spec.submodule_search_locations[0], "lib")]
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir:
        dirs.append(libdir)
    if env.get("LD_LIBRARY_PATH"):
        dirs.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(dirs)
    env.setdefault("RGPU_OPSERVER_PYTHON", sys.executable)


def _run(name):
    for path in _candidates(name):
        if os.access(path, os.X_OK):
            env = dict(os.environ)
            if name == "rgpu-opserver":
                _torch_environment(env)
            os.execve(path, [path] + sys.argv[1:], env)
    sys.stderr.write(
        f"{name}: the program is neither in the installed rgpu package nor in a CMake build (looked at: "
        f"{', '.join(_candidates(name)) or 'nothing: the rgpu package is not importable'}). Reinstall rgpu, or "
        "build it with CMake (scripts/setup.sh) and set RGPU_BUILD_DIR to the build directory\n")
    return 127


def server():
    return _run("rgpu-server")


def smi():
    return _run("rgpu-smi")


def opserver():
    return _run("rgpu-opserver")


def doctor():
    return _run("rgpu-doctor")
