// Implementation of server/prewarm.h.
#include "server/prewarm.h"

#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "protocol/session_table.h"
#include "server/nvml/nvml_server.h"

namespace rgpu::server::prewarm {
namespace {

DriverTable g_real;  // the driver's own entry points, before wrapping
std::mutex g_mu;
std::condition_variable g_cv;
bool g_ready = false;
CUdevice g_device = 0;       // device 0's handle
CUcontext g_held = nullptr;  // its primary context while held for the client; nullptr once taken or dropped

void wait_ready() {
  std::unique_lock<std::mutex> lock(g_mu);
  g_cv.wait(lock, [] { return g_ready; });
}

bool holds(CUdevice dev) { return g_held && dev == g_device; }

// With g_mu held. Gives the held context back to the driver, which destroys it.
void drop_locked() {
  if (!g_held) return;
  g_held = nullptr;
  g_real.cuDevicePrimaryCtxRelease_v2(g_device);
}

// Wrappers of the session's primary-context entry points (see prewarm.h).
CUresult CUDAAPI init(unsigned int flags) {
  wait_ready();
  return g_real.cuInit(flags);
}

CUresult CUDAAPI retain(CUcontext* pctx, CUdevice dev) {
  wait_ready();
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (pctx && holds(dev)) {
      *pctx = g_held;  // the client's reference is the one held for it
      g_held = nullptr;
      return CUDA_SUCCESS;
    }
  }
  return g_real.cuDevicePrimaryCtxRetain(pctx, dev);
}

// SetFlags, Release and Reset: the driver answers as it would with no hold.
void drop_hold_of(CUdevice dev) {
  wait_ready();
  std::lock_guard<std::mutex> lock(g_mu);
  if (holds(dev)) drop_locked();
}

template <CUresult(CUDAAPI* DriverTable::*Entry)(CUdevice, unsigned int)>
CUresult CUDAAPI without_hold_flags(CUdevice dev, unsigned int flags) {
  drop_hold_of(dev);
  return (g_real.*Entry)(dev, flags);
}

template <CUresult(CUDAAPI* DriverTable::*Entry)(CUdevice)>
CUresult CUDAAPI without_hold(CUdevice dev) {
  drop_hold_of(dev);
  return (g_real.*Entry)(dev);
}

// What the driver answered, for the listener's /healthz (server/metrics.h) through the shared table.
void report_driver_state(CUresult init_result) {
  proto::table::DriverState s;
  s.init_result = init_result;
  if (init_result == CUDA_SUCCESS) {
    if (g_real.cuDriverGetVersion) g_real.cuDriverGetVersion(&s.version);
    if (g_real.cuDeviceGetCount) g_real.cuDeviceGetCount(&s.devices);
    CUdevice dev = 0;
    if (s.devices > 0 && g_real.cuDeviceGet && g_real.cuDeviceGet(&dev, 0) == CUDA_SUCCESS) {
      if (g_real.cuDeviceGetName) g_real.cuDeviceGetName(s.gpu0, sizeof s.gpu0 - 1, dev);
      size_t bytes = 0;
      if (g_real.cuDeviceTotalMem_v2 && g_real.cuDeviceTotalMem_v2(&bytes, dev) == CUDA_SUCCESS) s.gpu0_memory = bytes;
    }
  }
  proto::table::set_driver_state(s);
}

void warm_up(Level level) {
  auto t0 = std::chrono::steady_clock::now();
  CUresult rc = g_real.cuInit ? g_real.cuInit(0) : CUDA_ERROR_NOT_SUPPORTED;
  CUcontext ctx = nullptr;
  if (rc == CUDA_SUCCESS && level == Level::kContext && g_real.cuDeviceGet(&g_device, 0) == CUDA_SUCCESS &&
      g_real.cuDevicePrimaryCtxRetain(&ctx, g_device) != CUDA_SUCCESS)
    ctx = nullptr;
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  report_driver_state(rc);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_held = ctx;
    g_ready = true;
  }
  g_cv.notify_all();
  log::info("warm: cuInit %d%s in %.0f ms", static_cast<int>(rc), ctx ? ", device 0's context held" : "", ms);
  // NVML last: a client's CUDA calls need nothing of it.
  nvml::table();
}

}  // namespace

bool parse_level(const std::string& text, Level* out) {
  if (text == "none") *out = Level::kNone;
  else if (text == "init") *out = Level::kInit;
  else if (text == "context") *out = Level::kContext;
  else return false;
  return true;
}

void start(DriverTable* table, Level level) {
  if (level == Level::kNone) return;
  nvml::set_init_ahead();
  g_real = *table;
  if (g_real.cuInit) table->cuInit = init;
  if (g_real.cuDevicePrimaryCtxRetain) table->cuDevicePrimaryCtxRetain = retain;
  if (g_real.cuDevicePrimaryCtxSetFlags) table->cuDevicePrimaryCtxSetFlags = without_hold_flags<&DriverTable::cuDevicePrimaryCtxSetFlags>;
  if (g_real.cuDevicePrimaryCtxSetFlags_v2)
    table->cuDevicePrimaryCtxSetFlags_v2 = without_hold_flags<&DriverTable::cuDevicePrimaryCtxSetFlags_v2>;
  if (g_real.cuDevicePrimaryCtxRelease) table->cuDevicePrimaryCtxRelease = without_hold<&DriverTable::cuDevicePrimaryCtxRelease>;
  if (g_real.cuDevicePrimaryCtxRelease_v2)
    table->cuDevicePrimaryCtxRelease_v2 = without_hold<&DriverTable::cuDevicePrimaryCtxRelease_v2>;
  if (g_real.cuDevicePrimaryCtxReset) table->cuDevicePrimaryCtxReset = without_hold<&DriverTable::cuDevicePrimaryCtxReset>;
  if (g_real.cuDevicePrimaryCtxReset_v2) table->cuDevicePrimaryCtxReset_v2 = without_hold<&DriverTable::cuDevicePrimaryCtxReset_v2>;
  std::thread(warm_up, level).detach();
}

void session_started() {
  std::thread([] {
    std::this_thread::sleep_for(kHoldFor);
    wait_ready();
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_held) log::debug("device 0's context was not asked for in %lld s; dropping it",
                           static_cast<long long>(kHoldFor.count()));
    drop_locked();
  }).detach();
}

}  // namespace rgpu::server::prewarm
