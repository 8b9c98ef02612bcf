// The kernels rgpu's tests launch. Real device code (nvcc builds cubin, fatbin and PTX from this
// file for the tests), and each kernel also has a host implementation in fakecuda/kernels.cpp, so
// the same launches run on the real driver (GPU machine) and on the fake driver (CI).
// Every kernel is extern "C" so its name in the image is the plain name. Keep the signatures in
// step with fakecuda/kernels.cpp and the layout assertions in common/cuda_image_test.cpp.
#include <cstdio>

// Mixed sizes and alignments on purpose: scale at 0, shift at 8, flag at 16, 24 bytes in all.
struct Affine {
  float scale;
  double shift;
  int flag;
};

extern "C" __global__ void rgpu_vec_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void rgpu_fill_u32(unsigned* p, unsigned value, unsigned long long n) {
  unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) p[i] = value;
}

extern "C" __global__ void rgpu_affine(float* x, Affine p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = static_cast<float>(x[i] * p.scale + p.shift + (p.flag ? 1.0 : 0.0));
}

// Busy-waits ms milliseconds of the GPU's global timer; only thread 0 of block 0 needs to spin
// for the kernel to last that long, the rest return at once.
extern "C" __global__ void rgpu_spin(long long ms) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  const unsigned long long end = start + static_cast<unsigned long long>(ms) * 1000000ull;
  for (;;) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now >= end) break;
    __nanosleep(100000);
  }
}

extern "C" __global__ void rgpu_empty() {}

extern "C" __global__ void rgpu_printf(int v) { printf("rgpu_printf: %d\n", v); }

// A parameter buffer over 4 KiB (CUDA 12.1+ allows 32764 bytes): nvcc describes such a kernel's
// parameters in a different .nv.info record (common/cuda_image.cpp). 8 KiB of values at 0, the
// output pointer at 8192, n at 8200: out[i] = v[i] + n for i < n (n <= 2048), one per thread.
struct BigParams {
  unsigned v[2048];
};

extern "C" __global__ void rgpu_big_params(BigParams p, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && i < 2048) out[i] = p.v[i] + static_cast<unsigned>(n);
}

// A kernel of internal linkage, as PyTorch has thousands (kernels in anonymous namespaces): its
// ELF symbol is LOCAL, and the client once read only global and weak ones, so every such kernel
// cost PyTorch a round trip to look up and another for its layout. Its mangled name carries a
// file hash; tests find it by the part "rgpu_local_scale".
namespace {
__global__ void rgpu_local_scale(float* x, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
}
}  // namespace

// Keeps the local kernel referenced from host code, so nvcc emits it.
void* rgpu_local_scale_address() { return reinterpret_cast<void*>(&rgpu_local_scale); }

// Module-scope variables: the fake driver places them (cuModuleGetGlobal, cuLibraryGetGlobal).
__device__ unsigned rgpu_global_counter;
__constant__ float rgpu_constant_table[16];
extern "C" __global__ void rgpu_count(unsigned add) { atomicAdd(&rgpu_global_counter, add + unsigned(rgpu_constant_table[0])); }
