#!/usr/bin/env bash
# Builds rgpu's container images with podman, needing no image registry (deploy/README.md):
#   rgpu-base          Debian 12 minbase from debootstrap, slimmed (made once, kept)
#   rgpu-server        rgpu-server (GPU host; --driver fake without a GPU)
#   rgpu-client        the CUDA and NVML shims, rgpu-smi (also as nvidia-smi), the vector_add demo
#   rgpu-client-torch  rgpu-client plus PyTorch (PyPI's CUDA build) in /opt/venv
# What goes in: the wheel in dist/ (scripts/build_wheels.sh) when there is one, else the programs
# of the CMake build in build/ (built here if missing), debug info stripped.
#
#   scripts/build_images.sh [--test] [--no-torch] [--rebuild-base]
#     --test          then start rgpu-server's image on the fake driver and run, from the client
#                     images against it: nvidia-smi -L, the vector_add demo, and
#                     torch.cuda.is_available() (must print True)
#     --no-torch      leave out rgpu-client-torch (about 4 GB of PyTorch and CUDA libraries)
#     --rebuild-base  make rgpu-base again (to take Debian's newest security updates)
#   RGPU_IMAGE_TAG     tag of the images (default latest)
#   RGPU_TORCH         what pip installs into rgpu-client-torch (default torch==2.11.0)
#   RGPU_PODMAN_OPTIONS  podman's global options for --test's containers (default --runtime runc,
#                        which this project's CPU machines need, below)
set -euo pipefail
cd "$(dirname "$0")/.."

test=0 torch=1 rebuild_base=0
for arg in "$@"; do
  case $arg in
    --test) test=1 ;;
    --no-torch) torch=0 ;;
    --rebuild-base) rebuild_base=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_images: unknown option '$arg' (see scripts/build_images.sh --help)" >&2; exit 2 ;;
  esac
done
tag=${RGPU_IMAGE_TAG:-latest}
torch_spec=${RGPU_TORCH:-torch==2.11.0}
work=build/images
ctx=$work/context
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
step_start=$SECONDS
step() {
  echo "build_images: $* (at $((SECONDS - step_start)) s)"
}

# podman builds (buildah inside it), debootstrap makes the base, runc runs the test containers:
# all from Debian.
need=()
for p in podman debootstrap runc; do command -v "$p" >/dev/null || [ -x "/usr/sbin/$p" ] || need+=("$p"); done
if ((${#need[@]})); then
  step "installing ${need[*]} from Debian"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null; } || {
    echo "build_images: cannot install ${need[*]} with apt; install them (Debian 12: apt-get install podman debootstrap runc) and run this again" >&2
    exit 1
  }
fi
export PATH="$PATH:/usr/sbin"

# Every `podman build` uses chroot isolation and the host's network: it needs no cgroups (this
# project's CPU machines mount cgroup v1 controllers, which podman's default OCI isolation refuses:
# "cgroups in hybrid mode not supported") and reaches Debian and PyPI as the host does.
# build NAME OPTIONS...: its output goes to build/images/NAME.log, shown when it fails.
build() {
  local name=$1
  shift
  $SUDO podman build --isolation chroot --network host "$@" >"$work/$name.log" 2>&1 || {
    tail -n 30 "$work/$name.log" >&2
    echo "build_images: building $name failed (above; the whole log: $work/$name.log)" >&2
    exit 1
  }
}

# --- What goes into the images: build/images/context -------------------------------------------
wheels=(dist/rgpu-*.whl)
[ -e "${wheels[0]}" ] || wheels=()
if ((${#wheels[@]})); then
  step "installing rgpu from ${wheels[*]}"
else
  step "installing rgpu from the CMake build in build/ (no wheel in dist/)"
fi
# The programs are built either way when build/ is configured: the wheel lacks the demo.
if [ ! -f build/build.ninja ] && [ ! -f build/Makefile ]; then
  if ((${#wheels[@]})); then
    echo "build_images: build/ is not configured, so the client images get no vector_add demo (--test needs it)"
  else
    step "configuring and building rgpu (scripts/setup.sh)"
    scripts/setup.sh
  fi
fi
if [ -f build/build.ninja ] || [ -f build/Makefile ]; then
  cmake --build build --target rgpu-server rgpu-smi vector_add rgpu_cuda rgpu_nvml fakecuda fakenvml
fi
rm -rf "$ctx"
mkdir -p "$work" "$ctx/dist" "$ctx/stage/opt/rgpu/bin" "$ctx/stage/opt/rgpu/lib" "$ctx/stage/opt/rgpu/share/rgpu"
cp deploy/containers/install_rgpu.sh "$ctx/"
((${#wheels[@]})) && cp "${wheels[@]}" "$ctx/dist/"
if [ -f build/bin/rgpu-server ]; then
  for f in bin/rgpu-server bin/rgpu-smi bin/vector_add lib/libcuda.so.1 lib/libnvidia-ml.so.1 lib/libfakecuda.so lib/libfakenvml.so; do
    [ -f "build/$f" ] || { echo "build_images: build/$f is missing; build it (cmake --build build)" >&2; exit 1; }
    # Debug info is most of a RelWithDebInfo build (rgpu-server: 27 MB of which 3 are code).
    strip --strip-debug -o "$ctx/stage/opt/rgpu/$f" "build/$f"
  done
  cp build/tests/kernels/test_kernels.fatbin "$ctx/stage/opt/rgpu/share/rgpu/"
fi

# --- rgpu-base: debootstrap, imported, slimmed (deploy/containers/base.Containerfile) -----------
if ((rebuild_base)) || ! $SUDO podman image exists localhost/rgpu-base:bookworm; then
  rootfs=$work/rootfs
  step "making the Debian 12 base with debootstrap (a few minutes)"
  $SUDO rm -rf "$rootfs"
  $SUDO debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 || {
    tail -n 20 "$work/debootstrap.log" >&2
    echo "build_images: debootstrap failed (its log: $work/debootstrap.log); it needs Debian's mirror, deb.debian.org" >&2
    exit 1
  }
  $SUDO tar -C "$rootfs" -c . | $SUDO podman import - localhost/rgpu-debootstrap:bookworm >/dev/null
  $SUDO rm -rf "$rootfs"
  build rgpu-base --squash-all -f deploy/containers/base.Containerfile -t localhost/rgpu-base:bookworm deploy/containers
  $SUDO podman rmi localhost/rgpu-debootstrap:bookworm >/dev/null
fi

# --- The images ------------------------------------------------------------------------------
# The Containerfiles mount the context rather than copy it, and a mount is not part of a layer's
# cache key: CONTEXT_DIGEST is, so that new programs make new layers.
digest=$(cd "$ctx" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
args=(--build-arg "CONTEXT_DIGEST=$digest" --build-arg "WITH_PYTHON=$((${#wheels[@]} ? 1 : 0))")
images=(rgpu-server rgpu-client)
step "building rgpu-server"
build rgpu-server -f deploy/containers/rgpu-server.Containerfile -t "localhost/rgpu-server:$tag" "${args[@]}" "$ctx"
step "building rgpu-client"
build rgpu-client -f deploy/containers/rgpu-client.Containerfile -t "localhost/rgpu-client:$tag" "${args[@]}" "$ctx"
if ((torch)); then
  step "building rgpu-client-torch ($torch_spec)"
  # The wheels are downloaded once into build/images/wheels, outside the image: a rebuild
  # downloads nothing. pip in the build trusts the CA certificates the host's pip trusts (where
  # PyPI is reached through a proxy that signs with its own CA), mounted for the build only.
  mkdir -p "$work/wheels"
  ca_opts=()
  ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
  [ -f "$ca" ] && ca_opts=(-v "$(realpath "$ca"):/run/host-ca.pem:ro" --build-arg PIP_CERT=/run/host-ca.pem)
  build rgpu-client-torch -f deploy/containers/rgpu-client-torch.Containerfile -t "localhost/rgpu-client-torch:$tag" \
    --build-arg "CONTEXT_DIGEST=$digest" --build-arg "TORCH=$torch_spec" "${ca_opts[@]}" \
    -v "$PWD/$work/wheels:/wheels" "$ctx"
  images+=(rgpu-client-torch)
fi
step "built"
for image in rgpu-base:bookworm "${images[@]/%/:$tag}"; do
  $SUDO podman image ls --format '  {{.Repository}}:{{.Tag}}  {{.Size}}' "localhost/$image"
done
((test)) || exit 0

# --- --test: the server image on the fake driver, the client images against it -----------------
# The run options this project's CPU machines need (a VM's root, cgroup v1): runc (crun refuses
# cgroups in hybrid mode) and open-file and process limits below the VM's hard limit (podman's
# defaults are above it: "setrlimit RLIMIT_NOFILE: Operation not permitted").
read -r -a run_opts <<<"${RGPU_PODMAN_OPTIONS:---runtime runc}"
run() {
  $SUDO podman "${run_opts[@]}" run --rm --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 --network host "$@"
}
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
server=rgpu-images-test-$$
step "test: rgpu-server image on the fake driver at 127.0.0.1:$port"
run -d --name "$server" "localhost/rgpu-server:$tag" --listen "127.0.0.1:$port" --driver fake >/dev/null
trap '$SUDO podman rm -f "$server" >/dev/null 2>&1 || true' EXIT
for _ in $(seq 100); do
  $SUDO podman logs "$server" 2>&1 | grep -q "listening on" && break
  $SUDO podman container exists "$server" && [ "$($SUDO podman inspect -f '{{.State.Running}}' "$server")" = true ] || {
    $SUDO podman logs "$server" >&2
    echo "build_images: the rgpu-server container stopped (its log is above)" >&2
    exit 1
  }
  sleep 0.1
done
failed=0
# check NAME PATTERN COMMAND...: runs COMMAND, passes when a line of its output matches PATTERN
# (grep -E).
check() {
  local name=$1 expected=$2 t0=$SECONDS out
  shift 2
  out=$("$@" 2>&1) || true
  if grep -qE -- "$expected" <<<"$out"; then
    echo "build_images: test $name: passed in $((SECONDS - t0)) s: $(grep -E -- "$expected" <<<"$out" | head -n 1)"
  else
    echo "build_images: test $name: FAILED (wanted '$expected'); its output:" >&2
    sed 's/^/  /' <<<"$out" >&2
    failed=1
  fi
}
env_opts=(-e "RGPU_SERVER=127.0.0.1:$port")
check "nvidia-smi -L (rgpu-client)" "^GPU 0: NVIDIA H200 \\(rgpu fake\\) \\(UUID: GPU-[0-9a-f-]+\\)$" \
  run "${env_opts[@]}" "localhost/rgpu-client:$tag" nvidia-smi -L
check "vector_add (rgpu-client)" "^vector_add: .*: correct" \
  run "${env_opts[@]}" "localhost/rgpu-client:$tag" vector_add /opt/rgpu/share/rgpu/test_kernels.fatbin
if ((torch)); then
  check "torch.cuda.is_available() (rgpu-client-torch)" "^True$" \
    run "${env_opts[@]}" "localhost/rgpu-client-torch:$tag" python -c "import torch; print(torch.cuda.is_available())"
fi
if ((failed)); then
  echo "build_images: the server's log:" >&2
  $SUDO podman logs "$server" 2>&1 | sed 's/^/  /' >&2
  exit 1
fi
step "tests passed"
