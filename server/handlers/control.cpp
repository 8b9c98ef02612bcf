// Implementation of server/handlers/control.h.
#include "server/handlers/control.h"

#include <cstring>
#include <vector>

#include "common/crypto.h"
#include "gen/ops.gen.h"
#include "protocol/session_table.h"
#include "protocol/snapshot.h"
#include "protocol/wire/control.h"
#include "protocol/wire/launch.h"
#include "protocol/wire/module.h"
#include "server/handlers/image.h"
#include "server/module_cache.h"

namespace rgpu::server::handlers {

void snapshot(Dispatch& d) {
  const DriverTable& drv = d.drv;
  proto::Snapshot s;
  s.init_result = drv.cuInit ? drv.cuInit(0) : CUDA_ERROR_NOT_SUPPORTED;
  int version = 0;
  if (drv.cuDriverGetVersion) drv.cuDriverGetVersion(&version);
  s.driver_version = version;
  int count = 0;
  if (s.init_result == CUDA_SUCCESS && drv.cuDeviceGetCount && drv.cuDeviceGetCount(&count) != CUDA_SUCCESS) count = 0;
  if (count < 0) count = 0;
  if (count > static_cast<int>(proto::kMaxSnapshotDevices)) count = proto::kMaxSnapshotDevices;
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    if (drv.cuDeviceGet(&dev, i) != CUDA_SUCCESS) break;
    proto::DeviceInfo info;
    char name[256] = {0};
    if (drv.cuDeviceGetName) drv.cuDeviceGetName(name, sizeof name - 1, dev);
    info.name = name;
    CUuuid uuid{};
    if (drv.cuDeviceGetUuid_v2) drv.cuDeviceGetUuid_v2(&uuid, dev);
    else if (drv.cuDeviceGetUuid) drv.cuDeviceGetUuid(&uuid, dev);
    std::memcpy(info.uuid.data(), uuid.bytes, 16);
    size_t total = 0;
    if (drv.cuDeviceTotalMem_v2) drv.cuDeviceTotalMem_v2(&total, dev);
    info.total_mem = total;
    char bus[64] = {0};
    if (drv.cuDeviceGetPCIBusId) drv.cuDeviceGetPCIBusId(bus, sizeof bus - 1, dev);
    info.pci_bus_id = bus;
    info.attrs.resize(CU_DEVICE_ATTRIBUTE_MAX);
    for (int a = 0; a < CU_DEVICE_ATTRIBUTE_MAX; ++a) {
      int v = 0;
      CUresult rc = a == 0 || !drv.cuDeviceGetAttribute
                        ? CUDA_ERROR_INVALID_VALUE
                        : drv.cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(a), dev);
      info.attrs[static_cast<size_t>(a)] = {rc, v};
    }
    s.devices.push_back(std::move(info));
  }
  // Every error code the driver can name (they are below 1000).
  for (int code = 0; code < 1000 && drv.cuGetErrorName; ++code) {
    const char* n = nullptr;
    const char* t = nullptr;
    if (drv.cuGetErrorName(static_cast<CUresult>(code), &n) != CUDA_SUCCESS || !n) continue;
    if (drv.cuGetErrorString) drv.cuGetErrorString(static_cast<CUresult>(code), &t);
    s.errors.push_back({code, n, t ? t : n});
  }
  for (const auto& h : module_cache::index(proto::kMaxSnapshotModules)) s.cached_modules.push_back(h);
  s.module_cache_on = module_cache::enabled();
  CUmoduleLoadingMode mode{};
  if (s.init_result == CUDA_SUCCESS && drv.cuModuleGetLoadingMode && drv.cuModuleGetLoadingMode(&mode) == CUDA_SUCCESS)
    s.loading_mode = mode;
  d.reply.put<int32_t>(CUDA_SUCCESS);
  proto::encode_snapshot(s, d.reply);
}

void module_by_hash(Dispatch& d) {
  proto::wire::ModuleByHash req;
  if (!proto::wire::read_module_by_hash(d.args, &req)) return;
  const uint64_t id = req.id;
  const uint16_t load_op = req.load_op;
  const crypto::Digest& hash = req.hash;
  if (load_op != op::cuModuleLoadData && load_op != op::cuLibraryLoadData)
    return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  std::vector<uint8_t> image;
  const bool hit = module_cache::load(hash, &image);
  proto::table::note_module_cache(hit);
  if (!hit) return d.reply.put<int32_t>(CUDA_ERROR_NOT_FOUND);
  CUresult rc = load_op == op::cuModuleLoadData ? load_module_image(d, id, image.data(), image.size())
                                                : load_library_image(d, id, image.data(), image.size());
  d.reply.put<int32_t>(rc);
}

void param_layout(Dispatch& d) {
  proto::wire::ParamLayoutAsk req;
  if (!proto::wire::read_param_layout_ask(d.args, &req)) return;
  const uint64_t id = req.id;
  const uint8_t kind = req.kind;  // 0 function, 1 kernel, 2 either
  if (kind > 2) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  void* handle = nullptr;
  if (!d.handles.get_raw(id, &handle) || !handle) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (!d.drv.cuKernelGetParamInfo || !d.drv.cuFuncGetParamInfo) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  std::vector<std::pair<uint64_t, uint64_t>> params;
  CUresult end = CUDA_ERROR_INVALID_VALUE;
  auto walk = [&](bool as_kernel) {
    params.clear();
    for (uint32_t i = 0; i < proto::kMaxParamLayout; ++i) {
      size_t offset = 0, size = 0;
      end = as_kernel ? d.drv.cuKernelGetParamInfo(static_cast<CUkernel>(handle), i, &offset, &size)
                      : d.drv.cuFuncGetParamInfo(static_cast<CUfunction>(handle), i, &offset, &size);
      if (end != CUDA_SUCCESS) return;
      params.emplace_back(offset, size);
    }
  };
  bool as_kernel = kind == 1;
  walk(as_kernel);
  // Either: a handle the function reading refuses outright (not "past the last parameter") is
  // read as a kernel.
  if (kind == 2 && params.empty() && end != CUDA_ERROR_INVALID_VALUE) walk(as_kernel = true);
  d.reply.put<int32_t>(CUDA_SUCCESS);
  proto::wire::put_param_layout(d.reply, {params, end, static_cast<uint8_t>(as_kernel ? 1 : 0)});
}


void func_attributes(Dispatch& d) {
  proto::wire::FuncAttributesAsk req;
  if (!proto::wire::read_func_attributes_ask(d.args, &req)) return;
  const uint64_t id = req.id;
  const uint8_t kind = req.kind;  // 0 function, 1 kernel
  const int32_t dev = req.device;  // the server's ordinal (the client translated it)
  if (kind > 1) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  void* handle = nullptr;
  if (!d.handles.get_raw(id, &handle) || !handle) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  if (kind ? !d.drv.cuKernelGetAttribute : !d.drv.cuFuncGetAttribute) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  const uint32_t n = std::min<uint32_t>(CU_FUNC_ATTRIBUTE_MAX, proto::kMaxFuncAttributes);
  std::vector<proto::wire::FuncAttribute> attrs;
  for (uint32_t a = 0; a < n; ++a) {
    int value = 0;
    const auto attr = static_cast<CUfunction_attribute>(a);
    CUresult rc = kind ? d.drv.cuKernelGetAttribute(&value, attr, static_cast<CUkernel>(handle), dev)
                       : d.drv.cuFuncGetAttribute(&value, attr, static_cast<CUfunction>(handle));
    attrs.push_back({static_cast<int32_t>(a), rc, rc == CUDA_SUCCESS ? value : 0});
  }
  d.reply.put<int32_t>(CUDA_SUCCESS);
  proto::wire::put_func_attributes(d.reply, attrs);
}

void alloc_ahead(Dispatch& d) {
  proto::wire::AllocAhead req;
  if (!proto::wire::read_alloc_ahead(d.args, &req)) return;
  const uint64_t size = req.size;
  const uint32_t extra = req.extra;
  if (size == 0 || extra > proto::kMaxAllocAhead || (extra && size > proto::kMaxAllocAheadBytes / extra))
    return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  if (!d.drv.cuMemAlloc_v2) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUdeviceptr first = 0;
  if (CUresult rc = d.drv.cuMemAlloc_v2(&first, size)) return d.reply.put<int32_t>(rc);
  std::vector<uint64_t> more;
  for (uint32_t i = 0; i < extra; ++i) {
    CUdeviceptr p = 0;
    if (d.drv.cuMemAlloc_v2(&p, size) != CUDA_SUCCESS) break;  // fewer ahead; the first stands
    more.push_back(p);
  }
  d.reply.put<int32_t>(CUDA_SUCCESS);
  proto::wire::put_alloc_ahead_reply(d.reply, first, more);
}

void handle_space(Dispatch& d) {
  const uint8_t space = d.args.u8();
  if (!d.args.ok()) return;
  if (space == 0) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  d.handles.set_space(space);
  d.reply.put<int32_t>(CUDA_SUCCESS);
}

void alloc_many(Dispatch& d) {
  proto::wire::AllocSizes want;
  if (!proto::wire::read_alloc_many(d.args, &want)) return;
  if (want.size() > proto::kMaxAllocMany) return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  uint64_t count = 0, bytes = 0;
  for (const auto& [size, n] : want) {
    if (size == 0 || n > proto::kMaxAllocManyCount || size > proto::kMaxAllocManyBytes)
      return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
    count += n;
    bytes += size * n;  // no overflow: both factors are capped far below 2^64 / 2^14
    if (count > proto::kMaxAllocManyCount || bytes > proto::kMaxAllocManyBytes)
      return d.reply.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  }
  if (!d.drv.cuMemAlloc_v2) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  // These are guesses: they stop where they would leave less than a quarter of the device free
  // (other programs share it), or at the first allocation that fails.
  size_t free_bytes = 0, total_bytes = 0;
  const bool known = d.drv.cuMemGetInfo_v2 && d.drv.cuMemGetInfo_v2(&free_bytes, &total_bytes) == CUDA_SUCCESS;
  bool failed = false;
  std::vector<std::vector<uint64_t>> made_all;
  for (const auto& [size, n] : want) {
    std::vector<uint64_t>& made = made_all.emplace_back();
    for (uint32_t i = 0; i < n && !failed; ++i) {
      if (known && (size > free_bytes || free_bytes - size < total_bytes / 4)) {
        failed = true;
        break;
      }
      CUdeviceptr p = 0;
      failed = d.drv.cuMemAlloc_v2(&p, size) != CUDA_SUCCESS;
      if (!failed) made.push_back(p);
      free_bytes -= failed ? 0 : size;
    }
  }
  d.reply.put<int32_t>(CUDA_SUCCESS);
  proto::wire::put_alloc_many_reply(d.reply, made_all);
}

}  // namespace rgpu::server::handlers
