// cuDNN v9 graph (backend) API running convolutions, checked against a CPU reference: forward,
// backward data and backward filter, FP32, NCHW, a non-square input with stride 2 along W. Each
// is its own operation graph; engine configurations come from CUDNN_HEUR_MODE_A and then
// CUDNN_HEUR_MODE_FALLBACK, and the first one whose execution plan finalizes and executes is
// checked. Work runs on a non-default stream (cudnnSetStream).
//
// Inputs are multiples of 1/4 in [-2, 2] (exact in TF32, which FP32 engines may use), so every
// product is exact; the tolerance (1e-4 relative) leaves room for engines that transform the
// problem (FFT, Winograd) and still catches any wrong or missing output.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "check.h"

// CUDNN_ATTR_OPERATIONGRAPH_HANDLE and CUDNN_ATTR_EXECUTION_PLAN_HANDLE are deprecated in newer
// cuDNN 9 releases (device-property descriptors replace them) but are what every cuDNN 9 accepts.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#pragma nv_diag_suppress 1215

#define CUDA(expr) CHECK_STATUS(expr, cudaGetErrorString)
#define CUDNN(expr) CHECK_STATUS(expr, cudnnGetErrorString)

// Problem: x N x C x H x W, w K x C x R x S, y N x K x P x Q.
constexpr int64_t N = 2, C = 3, H = 7, W = 9, K = 5, R = 3, S = 3;
constexpr int64_t kPad[2] = {1, 1}, kStride[2] = {1, 2}, kDilation[2] = {1, 1};
constexpr int64_t P = (H + 2 * kPad[0] - kDilation[0] * (R - 1) - 1) / kStride[0] + 1;
constexpr int64_t Q = (W + 2 * kPad[1] - kDilation[1] * (S - 1) - 1) / kStride[1] + 1;
enum : int64_t { kUidX = 1, kUidW = 2, kUidY = 3 };

static uint32_t g_seed = 4242;
static float quarter() {
  g_seed = g_seed * 1664525u + 1013904223u;
  return static_cast<float>(static_cast<int>((g_seed >> 16) % 17) - 8) / 4.0f;
}

static void print_last_error(const char* what) {
  char message[512] = {0};
  cudnnGetLastErrorString(message, sizeof message);
  std::printf("  (%s: %s)\n", what, message[0] ? message : "no message");
}

// A descriptor that destroys itself.
struct Desc {
  cudnnBackendDescriptor_t d = nullptr;
  explicit Desc(cudnnBackendDescriptorType_t type) { CUDNN(cudnnBackendCreateDescriptor(type, &d)); }
  ~Desc() {
    if (d) cudnnBackendDestroyDescriptor(d);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc(Desc&& o) noexcept : d(o.d) { o.d = nullptr; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values) {
    CUDNN(cudnnBackendSetAttribute(d, name, type, count, values));
  }
  void set_desc(cudnnBackendAttributeName_t name, const Desc& other) {
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &other.d);
  }
  void finalize() { CUDNN(cudnnBackendFinalize(d)); }
};

static Desc tensor(int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w) {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t dims[4] = {n, c, h, w}, strides[4] = {c * h * w, h * w, w, 1}, alignment = 16;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  t.finalize();
  return t;
}

static Desc convolution() {
  Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const int64_t spatial = 2;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial);
  conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, kPad);
  conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, kPad);
  conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, kStride);
  conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, kDilation);
  conv.finalize();
  return conv;
}

// The three operations differ only in their descriptor type and attribute names.
struct OpKind {
  const char* name;
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;  // x/w/y: the tensors with uids 1/2/3
  int64_t output_uid;
};
static const OpKind kForward = {"forward", CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                                kUidY};
static const OpKind kBackwardData = {
    "backward data", CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, kUidX};
static const OpKind kBackwardFilter = {
    "backward filter", CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
    CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, kUidW};

// Builds the graph of one operation, finds a plan that runs, runs it on d[uid 1..3] and returns
// the output copied back; an empty vector if no plan ran.
static std::vector<float> run(cudnnHandle_t handle, cudaStream_t stream, const OpKind& kind, float* d[4],
                              size_t out_count) {
  Desc x = tensor(kUidX, N, C, H, W), w = tensor(kUidW, K, C, R, S), y = tensor(kUidY, N, K, P, Q);
  Desc conv = convolution();
  Desc op(kind.type);
  const float alpha = 1.0f, beta = 0.0f;
  op.set_desc(kind.x, x);
  op.set_desc(kind.w, w);
  op.set_desc(kind.y, y);
  op.set_desc(kind.conv, conv);
  op.set(kind.alpha, CUDNN_TYPE_FLOAT, 1, &alpha);
  op.set(kind.beta, CUDNN_TYPE_FLOAT, 1, &beta);
  op.finalize();

  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op.d);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  graph.finalize();

  std::vector<float> out;
  int tried = 0;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    const char* mode_name = mode == CUDNN_HEUR_MODE_A ? "HEUR_MODE_A" : "HEUR_MODE_FALLBACK";
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
    heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (cudnnBackendFinalize(heur.d) != CUDNN_STATUS_SUCCESS) {
      std::printf("%s: %s does not finalize\n", kind.name, mode_name);
      print_last_error("heuristics");
      continue;
    }
    int64_t count = 0;
    CUDNN(cudnnBackendGetAttribute(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                   nullptr));
    std::vector<Desc> cfgs;
    for (int64_t i = 0; i < count; ++i) cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    std::vector<cudnnBackendDescriptor_t> raw;
    for (auto& c : cfgs) raw.push_back(c.d);
    int64_t got = 0;
    if (count > 0)
      CUDNN(cudnnBackendGetAttribute(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                     raw.data()));
    std::printf("%s: %s gave %lld engine configurations\n", kind.name, mode_name, static_cast<long long>(got));

    for (int64_t i = 0; i < got; ++i) {
      ++tried;
      Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      int64_t n_engine = 0, engine_index = -1;
      if (cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n_engine,
                                   &engine.d) == CUDNN_STATUS_SUCCESS)
        cudnnBackendGetAttribute(engine.d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n_engine,
                                 &engine_index);
      Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i]);
      cudnnStatus_t st = cudnnBackendFinalize(plan.d);
      if (st != CUDNN_STATUS_SUCCESS) {
        std::printf("%s: engine %lld: plan does not finalize (%s), next\n", kind.name,
                    static_cast<long long>(engine_index), cudnnGetErrorString(st));
        continue;
      }
      int64_t workspace_size = 0, n_ws = 0;
      CUDNN(cudnnBackendGetAttribute(plan.d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n_ws,
                                     &workspace_size));
      void* workspace = nullptr;
      if (workspace_size > 0) CUDA(cudaMalloc(&workspace, static_cast<size_t>(workspace_size)));

      Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
      const int64_t uids[3] = {kUidX, kUidW, kUidY};
      void* pointers[3] = {d[kUidX], d[kUidW], d[kUidY]};
      pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
      pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers);
      pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
      pack.finalize();

      // NaNs in the output first, so an output the engine does not write shows.
      CUDA(cudaMemsetAsync(d[kind.output_uid], 0xff, out_count * sizeof(float), stream));
      st = cudnnBackendExecute(handle, plan.d, pack.d);
      if (st != CUDNN_STATUS_SUCCESS) {
        std::printf("%s: engine %lld: execute failed (%s), next\n", kind.name, static_cast<long long>(engine_index),
                    cudnnGetErrorString(st));
        print_last_error("execute");
        CUDA(cudaStreamSynchronize(stream));
        if (workspace) CUDA(cudaFree(workspace));
        continue;
      }
      out.resize(out_count);
      CUDA(cudaMemcpyAsync(out.data(), d[kind.output_uid], out_count * sizeof(float), cudaMemcpyDeviceToHost, stream));
      CUDA(cudaStreamSynchronize(stream));
      if (workspace) CUDA(cudaFree(workspace));
      std::printf("%s: ran engine %lld from %s (configuration %lld, workspace %lld bytes)\n", kind.name,
                  static_cast<long long>(engine_index), mode_name, static_cast<long long>(i),
                  static_cast<long long>(workspace_size));
      return out;
    }
  }
  CHECK(false, "%s: none of %d engine configurations ran", kind.name, tried);
  return out;
}

static size_t xi(int64_t n, int64_t c, int64_t h, int64_t w) { return ((n * C + c) * H + h) * W + w; }
static size_t wi(int64_t k, int64_t c, int64_t r, int64_t s) { return ((k * C + c) * R + r) * S + s; }
static size_t yi(int64_t n, int64_t k, int64_t p, int64_t q) { return ((n * K + k) * P + p) * Q + q; }

// Calls f(x index, w index, y index) for every multiply of the convolution.
template <class F>
static void for_each_tap(F f) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q)
          for (int64_t c = 0; c < C; ++c)
            for (int64_t r = 0; r < R; ++r)
              for (int64_t s = 0; s < S; ++s) {
                int64_t h = p * kStride[0] - kPad[0] + r * kDilation[0];
                int64_t w = q * kStride[1] - kPad[1] + s * kDilation[1];
                if (h < 0 || h >= H || w < 0 || w >= W) continue;
                f(xi(n, c, h, w), wi(k, c, r, s), yi(n, k, p, q));
              }
}

static void compare(const char* name, const std::vector<float>& got, const std::vector<double>& want) {
  if (got.empty()) return;  // already failed: nothing ran
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double e = std::fabs(got[i] - want[i]) / (1.0 + std::fabs(want[i]));
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  std::printf("%s: %zu outputs, worst relative error %.3g\n", name, want.size(), worst);
  CHECK(worst < 1e-4, "%s: error %g", name, worst);
}

int main() {
  std::printf("cuDNN version %zu; x %lldx%lldx%lldx%lld, w %lldx%lldx%lldx%lld, y %lldx%lldx%lldx%lld (NCHW, FP32)\n",
              cudnnGetVersion(), (long long)N, (long long)C, (long long)H, (long long)W, (long long)K, (long long)C,
              (long long)R, (long long)S, (long long)N, (long long)K, (long long)P, (long long)Q);
  cudnnHandle_t handle = nullptr;
  CUDNN(cudnnCreate(&handle));
  CHECK(handle != nullptr, "no handle");
  if (!handle) return finish();
  cudaStream_t stream = nullptr;
  CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUDNN(cudnnSetStream(handle, stream));

  const size_t nx = N * C * H * W, nw = K * C * R * S, ny = N * K * P * Q;
  std::vector<float> x(nx), w(nw), dy(ny);
  for (auto& v : x) v = quarter();
  for (auto& v : w) v = quarter();
  for (auto& v : dy) v = quarter();
  float* d[4] = {nullptr, nullptr, nullptr, nullptr};
  CUDA(cudaMalloc(&d[kUidX], nx * sizeof(float)));
  CUDA(cudaMalloc(&d[kUidW], nw * sizeof(float)));
  CUDA(cudaMalloc(&d[kUidY], ny * sizeof(float)));

  // Forward: y from x and w.
  CUDA(cudaMemcpyAsync(d[kUidX], x.data(), nx * sizeof(float), cudaMemcpyHostToDevice, stream));
  CUDA(cudaMemcpyAsync(d[kUidW], w.data(), nw * sizeof(float), cudaMemcpyHostToDevice, stream));
  std::vector<double> y_want(ny, 0.0);
  for_each_tap([&](size_t a, size_t b, size_t c) { y_want[c] += static_cast<double>(x[a]) * w[b]; });
  compare("forward", run(handle, stream, kForward, d, ny), y_want);

  // Backward data: dx from dy (in the y buffer) and w.
  CUDA(cudaMemcpyAsync(d[kUidY], dy.data(), ny * sizeof(float), cudaMemcpyHostToDevice, stream));
  std::vector<double> dx_want(nx, 0.0);
  for_each_tap([&](size_t a, size_t b, size_t c) { dx_want[a] += static_cast<double>(dy[c]) * w[b]; });
  compare("backward data", run(handle, stream, kBackwardData, d, nx), dx_want);

  // Backward filter: dw from x and dy.
  CUDA(cudaMemcpyAsync(d[kUidX], x.data(), nx * sizeof(float), cudaMemcpyHostToDevice, stream));
  std::vector<double> dw_want(nw, 0.0);
  for_each_tap([&](size_t a, size_t b, size_t c) { dw_want[b] += static_cast<double>(dy[c]) * x[a]; });
  compare("backward filter", run(handle, stream, kBackwardFilter, d, nw), dw_want);

  for (int i = 1; i < 4; ++i) CUDA(cudaFree(d[i]));
  CUDNN(cudnnDestroy(handle));
  CUDA(cudaStreamDestroy(stream));
  CUDA(cudaGetLastError());
  return finish();
}
