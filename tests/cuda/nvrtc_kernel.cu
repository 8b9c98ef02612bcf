// NVRTC compiling kernels at run time, loaded and launched through the driver API: the source is
// compiled to a CUBIN for sm_90 (nvrtcGetCUBIN) and to PTX for compute_90 (nvrtcGetPTX); each
// image is loaded with cuModuleLoadData and with cuLibraryLoadData (PTX is JIT-compiled by the
// driver), and both kernels (an extern "C" one and a template found by its lowered name) are
// launched with cuLaunchKernel and checked.
//
// The driver API is reached through cudaGetDriverEntryPointByVersion, not by linking libcuda: the
// program's only libcuda is the one the runtime loads (rgpu's shim, under rgpu), and the lookup
// itself goes through the driver's cuGetProcAddress.
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvrtc.h>

#include <cstring>
#include <string>
#include <vector>

#include "check.h"

#define CUDA(expr) CHECK_STATUS(expr, cudaGetErrorString)
#define NVRTC(expr) CHECK_STATUS(expr, nvrtcGetErrorString)

static const char* kSource = R"(
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

template <int kScale>
__global__ void scale_add_index(const int* in, int* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = in[i] * kScale + i;
}
)";
static const char* kTemplateName = "scale_add_index<3>";

// Driver entry points, typed from cuda.h's declarations.
#define RGPU_DRIVER_FUNCTIONS(X) \
  X(cuGetErrorString)            \
  X(cuModuleLoadData)            \
  X(cuModuleGetFunction)         \
  X(cuModuleUnload)              \
  X(cuLibraryLoadData)           \
  X(cuLibraryGetKernel)          \
  X(cuKernelGetFunction)         \
  X(cuLibraryUnload)             \
  X(cuLaunchKernel)
#define RGPU_DECLARE(name) static decltype(&name) p_##name = nullptr;
RGPU_DRIVER_FUNCTIONS(RGPU_DECLARE)

static const char* cu_text(CUresult r) {
  const char* s = nullptr;
  if (!p_cuGetErrorString || p_cuGetErrorString(r, &s) != CUDA_SUCCESS || !s) return "unknown CUresult";
  return s;
}
#define CU(expr) CHECK_STATUS(expr, cu_text)

static bool load_driver() {
  bool ok = true;
#define RGPU_LOAD(name)                                                                                            \
  {                                                                                                                \
    void* fn = nullptr;                                                                                            \
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;                                        \
    CUDA(cudaGetDriverEntryPointByVersion(#name, &fn, CUDA_VERSION, cudaEnableDefault, &q));                       \
    CHECK(fn != nullptr && q == cudaDriverEntryPointSuccess, "driver entry point %s not found (query result %d)", \
          #name, static_cast<int>(q));                                                                             \
    p_##name = reinterpret_cast<decltype(p_##name)>(fn);                                                           \
    ok = ok && fn != nullptr;                                                                                      \
  }
  RGPU_DRIVER_FUNCTIONS(RGPU_LOAD)
#undef RGPU_LOAD
  return ok;
}

struct Image {
  std::vector<char> bytes;
  std::string lowered;  // the template kernel's mangled name
};

// Compiles kSource for `arch`; the CUBIN when `cubin`, else the PTX.
static Image compile(const char* arch, bool cubin) {
  Image image;
  nvrtcProgram prog = nullptr;
  NVRTC(nvrtcCreateProgram(&prog, kSource, "rgpu_nvrtc_kernel.cu", 0, nullptr, nullptr));
  if (!prog) return image;
  NVRTC(nvrtcAddNameExpression(prog, kTemplateName));
  std::string arch_option = std::string("--gpu-architecture=") + arch;
  const char* options[] = {arch_option.c_str(), "--std=c++17"};
  nvrtcResult r = nvrtcCompileProgram(prog, 2, options);
  NVRTC(r);
  size_t log_size = 0;
  NVRTC(nvrtcGetProgramLogSize(prog, &log_size));
  if (r != NVRTC_SUCCESS && log_size > 1) {
    std::string log(log_size, '\0');
    NVRTC(nvrtcGetProgramLog(prog, &log[0]));
    std::printf("compile log:\n%s\n", log.c_str());
  }
  if (r == NVRTC_SUCCESS) {
    const char* lowered = nullptr;
    NVRTC(nvrtcGetLoweredName(prog, kTemplateName, &lowered));
    if (lowered) image.lowered = lowered;
    size_t size = 0;
    if (cubin) {
      NVRTC(nvrtcGetCUBINSize(prog, &size));
      image.bytes.resize(size);
      if (size) NVRTC(nvrtcGetCUBIN(prog, image.bytes.data()));
    } else {
      NVRTC(nvrtcGetPTXSize(prog, &size));  // includes the terminating NUL
      image.bytes.resize(size);
      if (size) NVRTC(nvrtcGetPTX(prog, image.bytes.data()));
    }
  }
  NVRTC(nvrtcDestroyProgram(&prog));
  return image;
}

// Launches both kernels as `saxpy` and `scale` on `stream` and checks their results.
static void launch_and_check(const char* what, CUfunction saxpy, CUfunction scale, CUstream stream) {
  const int n = 10000;
  std::vector<float> x(n), y(n);
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 100) / 4;
    y[i] = static_cast<float>(i % 7);
    in[i] = i * 3 - 5000;
  }
  float *dx = nullptr, *dy = nullptr;
  int *din = nullptr, *dout = nullptr;
  CUDA(cudaMalloc(&dx, n * sizeof(float)));
  CUDA(cudaMalloc(&dy, n * sizeof(float)));
  CUDA(cudaMalloc(&din, n * sizeof(int)));
  CUDA(cudaMalloc(&dout, n * sizeof(int)));
  CUDA(cudaMemcpyAsync(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
  CUDA(cudaMemcpyAsync(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
  CUDA(cudaMemcpyAsync(din, in.data(), n * sizeof(int), cudaMemcpyHostToDevice, stream));
  CUDA(cudaMemsetAsync(dout, 0, n * sizeof(int), stream));

  float a = 2.5f;
  int count = n;
  void* saxpy_args[] = {&a, &dx, &dy, &count};
  CU(p_cuLaunchKernel(saxpy, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, saxpy_args, nullptr));
  void* scale_args[] = {&din, &dout, &count};
  CU(p_cuLaunchKernel(scale, 8, 1, 1, 128, 1, 1, 0, stream, scale_args, nullptr));  // grid-stride loop
  std::vector<float> got_y(n);
  std::vector<int> got_out(n);
  CUDA(cudaMemcpyAsync(got_y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CUDA(cudaMemcpyAsync(got_out.data(), dout, n * sizeof(int), cudaMemcpyDeviceToHost, stream));
  CUDA(cudaStreamSynchronize(stream));
  int bad_y = 0, bad_out = 0;
  for (int i = 0; i < n; ++i) {
    bad_y += got_y[i] != a * x[i] + y[i];  // exact: quarters times 2.5 plus small integers
    bad_out += got_out[i] != in[i] * 3 + i;
  }
  std::printf("%s: saxpy %d of %d right, %s %d of %d right\n", what, n - bad_y, n, kTemplateName, n - bad_out, n);
  CHECK(bad_y == 0, "%s: saxpy wrong in %d places", what, bad_y);
  CHECK(bad_out == 0, "%s: %s wrong in %d places", what, kTemplateName, bad_out);
  for (void* p : {static_cast<void*>(dx), static_cast<void*>(dy), static_cast<void*>(din), static_cast<void*>(dout)})
    CUDA(cudaFree(p));
}

int main() {
  int major = 0, minor = 0;
  NVRTC(nvrtcVersion(&major, &minor));
  std::printf("NVRTC %d.%d\n", major, minor);
  CUDA(cudaSetDevice(0));
  CUDA(cudaFree(nullptr));  // the primary context, current on this thread for the driver calls below
  if (!load_driver()) return finish();
  cudaStream_t stream = nullptr;
  CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  Image cubin = compile("sm_90", true);
  Image ptx = compile("compute_90", false);
  std::printf("CUBIN: %zu bytes; PTX: %zu bytes; %s lowered to %s\n", cubin.bytes.size(), ptx.bytes.size(),
              kTemplateName, cubin.lowered.c_str());
  CHECK(cubin.bytes.size() > 4 && std::memcmp(cubin.bytes.data(), "\x7f" "ELF", 4) == 0, "the CUBIN is not an ELF image");
  CHECK(!ptx.bytes.empty() && std::strstr(ptx.bytes.data(), ".entry saxpy") != nullptr, "the PTX has no saxpy entry");
  CHECK(!cubin.lowered.empty() && cubin.lowered == ptx.lowered, "lowered names '%s' and '%s'", cubin.lowered.c_str(),
        ptx.lowered.c_str());
  if (cubin.bytes.empty() || ptx.bytes.empty() || cubin.lowered.empty()) return finish();

  const struct {
    const Image* image;
    const char* name;
  } images[] = {{&cubin, "CUBIN sm_90"}, {&ptx, "PTX compute_90"}};
  for (const auto& im : images) {
    std::string what = std::string(im.name) + " via cuModuleLoadData";
    CUmodule mod = nullptr;
    CU(p_cuModuleLoadData(&mod, im.image->bytes.data()));
    if (mod) {
      CUfunction saxpy = nullptr, scale = nullptr;
      CU(p_cuModuleGetFunction(&saxpy, mod, "saxpy"));
      CU(p_cuModuleGetFunction(&scale, mod, im.image->lowered.c_str()));
      if (saxpy && scale) launch_and_check(what.c_str(), saxpy, scale, stream);
      CU(p_cuModuleUnload(mod));
    }

    what = std::string(im.name) + " via cuLibraryLoadData";
    CUlibrary lib = nullptr;
    CU(p_cuLibraryLoadData(&lib, im.image->bytes.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
    if (lib) {
      CUkernel ks = nullptr, kt = nullptr;
      CU(p_cuLibraryGetKernel(&ks, lib, "saxpy"));
      CU(p_cuLibraryGetKernel(&kt, lib, im.image->lowered.c_str()));
      CUfunction saxpy = nullptr, scale = nullptr;
      if (ks) CU(p_cuKernelGetFunction(&saxpy, ks));
      if (kt) CU(p_cuKernelGetFunction(&scale, kt));
      if (saxpy && scale) launch_and_check(what.c_str(), saxpy, scale, stream);
      CU(p_cuLibraryUnload(lib));
    }
  }

  CUDA(cudaStreamDestroy(stream));
  CUDA(cudaGetLastError());
  return finish();
}
