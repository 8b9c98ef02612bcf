// Host functions in stream order, on two streams at once. Each stream runs a chain of steps:
// copy a pinned input to the device, a kernel (v = 3 v + step), copy the result to pinned memory,
// then a host function (cudaLaunchHostFunc on even steps, cudaStreamAddCallback on odd ones) that
// records what it saw and writes the next step's input. A host function that ran before the copy
// ahead of it, or after the copy behind it, changes every later value, so the final values and the
// recorded order check both directions of stream ordering. At the end the second stream waits on
// an event of the first, and its last host function checks that the first stream's have all run.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "check.h"

#define CUDA(expr) CHECK_STATUS(expr, cudaGetErrorString)

__global__ void step_kernel(int64_t* v, int step) { *v = *v * 3 + step; }

constexpr int kStreams = 2, kSteps = 8;

struct Record {
  int stream, step;
  int64_t seen;
  bool via_callback;
};
static Record g_records[kStreams * kSteps + kStreams];
static std::atomic<int> g_count{0};

struct StepContext {
  int stream, step;
  int64_t* in;   // pinned: the next step's input
  int64_t* out;  // pinned: this step's result
};
static StepContext g_contexts[kStreams][kSteps];

static void record(const StepContext* c, bool via_callback) {
  int i = g_count.fetch_add(1);
  g_records[i] = {c->stream, c->step, *c->out, via_callback};
  *c->in = *c->out + 1000 * (c->stream + 1);
}

static void CUDART_CB host_fn(void* data) { record(static_cast<StepContext*>(data), false); }

static std::atomic<int> g_bad_status{0};
static void CUDART_CB stream_callback(cudaStream_t, cudaError_t status, void* data) {
  if (status != cudaSuccess) g_bad_status.fetch_add(1);
  record(static_cast<StepContext*>(data), true);
}

static std::atomic<int> g_first_stream_done_seen{-1};
static void CUDART_CB check_first_stream_done(void*) {
  int done = 0, n = g_count.load();
  for (int i = 0; i < n; ++i) done += g_records[i].stream == 0;
  g_first_stream_done_seen.store(done);
}

int main() {
  cudaStream_t streams[kStreams];
  int64_t *in = nullptr, *out = nullptr, *dev = nullptr;
  CUDA(cudaMallocHost(&in, kStreams * sizeof(int64_t)));
  CUDA(cudaMallocHost(&out, kStreams * sizeof(int64_t)));
  CUDA(cudaMalloc(&dev, kStreams * sizeof(int64_t)));
  if (!in || !out || !dev) return finish();
  for (int s = 0; s < kStreams; ++s) {
    CUDA(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking));
    in[s] = 10 + s;
    out[s] = -1;
  }

  for (int step = 0; step < kSteps; ++step)
    for (int s = 0; s < kStreams; ++s) {
      StepContext* c = &g_contexts[s][step];
      *c = {s, step, &in[s], &out[s]};
      CUDA(cudaMemcpyAsync(&dev[s], &in[s], sizeof(int64_t), cudaMemcpyHostToDevice, streams[s]));
      step_kernel<<<1, 1, 0, streams[s]>>>(&dev[s], step);
      CUDA(cudaGetLastError());
      CUDA(cudaMemcpyAsync(&out[s], &dev[s], sizeof(int64_t), cudaMemcpyDeviceToHost, streams[s]));
      if (step % 2 == 0)
        CUDA(cudaLaunchHostFunc(streams[s], host_fn, c));
      else
        CUDA(cudaStreamAddCallback(streams[s], stream_callback, c, 0));
    }
  cudaEvent_t first_done = nullptr;
  CUDA(cudaEventCreateWithFlags(&first_done, cudaEventDisableTiming));
  CUDA(cudaEventRecord(first_done, streams[0]));
  CUDA(cudaStreamWaitEvent(streams[1], first_done, 0));
  CUDA(cudaLaunchHostFunc(streams[1], check_first_stream_done, nullptr));
  for (int s = 0; s < kStreams; ++s) CUDA(cudaStreamSynchronize(streams[s]));

  // What each step must have seen, computed on the host.
  int64_t want[kStreams][kSteps];
  for (int s = 0; s < kStreams; ++s) {
    int64_t v = 10 + s;
    for (int step = 0; step < kSteps; ++step) {
      v = v * 3 + step;
      want[s][step] = v;
      v += 1000 * (s + 1);
    }
  }
  const int n = g_count.load();
  CHECK(n == kStreams * kSteps, "%d host functions ran, %d queued", n, kStreams * kSteps);
  int next_step[kStreams] = {0, 0};
  for (int i = 0; i < n; ++i) {
    const Record& r = g_records[i];
    CHECK(r.step == next_step[r.stream], "record %d: stream %d ran step %d, expected step %d", i, r.stream, r.step,
          next_step[r.stream]);
    next_step[r.stream] = r.step + 1;
    CHECK(r.seen == want[r.stream][r.step], "stream %d step %d saw %lld, the kernel before it made %lld", r.stream,
          r.step, static_cast<long long>(r.seen), static_cast<long long>(want[r.stream][r.step]));
    CHECK(r.via_callback == (r.step % 2 == 1), "stream %d step %d ran through the wrong API", r.stream, r.step);
  }
  int interleaved = 0;
  for (int i = 1; i < n; ++i) interleaved += g_records[i].stream != g_records[i - 1].stream;
  std::printf("%d host functions ran (%d cudaLaunchHostFunc, %d cudaStreamAddCallback), in stream order, on %d "
              "streams (%d switches between streams in the order they ran)\n",
              n, kStreams * ((kSteps + 1) / 2), kStreams * (kSteps / 2), kStreams, interleaved);
  for (int s = 0; s < kStreams; ++s)
    std::printf("stream %d: final value %lld (want %lld)\n", s, static_cast<long long>(out[s]),
                static_cast<long long>(want[s][kSteps - 1]));
  for (int s = 0; s < kStreams; ++s)
    CHECK(out[s] == want[s][kSteps - 1], "stream %d final %lld", s, static_cast<long long>(out[s]));
  CHECK(g_bad_status.load() == 0, "%d stream callbacks got an error status", g_bad_status.load());
  CHECK(g_first_stream_done_seen.load() == kSteps,
        "after waiting on stream 0's event, stream 1 saw %d of stream 0's %d host functions done",
        g_first_stream_done_seen.load(), kSteps);

  CUDA(cudaEventDestroy(first_done));
  for (int s = 0; s < kStreams; ++s) CUDA(cudaStreamDestroy(streams[s]));
  CUDA(cudaFreeHost(in));
  CUDA(cudaFreeHost(out));
  CUDA(cudaFree(dev));
  CUDA(cudaGetLastError());
  return finish();
}
