// The process fakecuda_checkpoint_test locks, checkpoints, restores and moves: a CUDA program on
// the fake driver with 1 MiB of device memory filled with 0x5a. Prints "ready" once set up, then
// answers one line per command on stdin:
//   check  copies the memory back (this waits while the process is locked or checkpointed) and
//          prints "ok" when every byte is still 0x5a, else "bad"
//   busy   queues a host function that takes 1.5 s on the default stream (a lock must wait for
//          it) and prints "queued"
//   quit   exits
#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

int main() {
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr p;
  const size_t n = 1 << 20;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuCtxCreate_v4(&ctx, nullptr, 0, dev) || cuMemAlloc_v2(&p, n) ||
      cuMemsetD8_v2(p, 0x5a, n) || cuCtxSynchronize()) {
    std::printf("setup failed\n");
    return 1;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::printf("ready\n");
  char line[64];
  while (std::fgets(line, sizeof line, stdin)) {
    std::string cmd(line, strcspn(line, "\n"));
    if (cmd == "quit") return 0;
    if (cmd == "check") {
      std::vector<unsigned char> back(n);
      CUresult r = cuMemcpyDtoH_v2(back.data(), p, n);
      bool same = r == CUDA_SUCCESS;
      for (unsigned char b : back) same = same && b == 0x5a;
      std::printf("%s\n", same ? "ok" : "bad");
    } else if (cmd == "busy") {
      CUresult r = cuLaunchHostFunc(nullptr, [](void*) { usleep(1500 * 1000); }, nullptr);
      std::printf("%s\n", r == CUDA_SUCCESS ? "queued" : "failed");
    }
  }
  return 0;
}
