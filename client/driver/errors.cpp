// cuGetErrorName and cuGetErrorString. After connecting, the answers are the server driver's own
// words (from the snapshot). Before that, or for codes the server did not list, a local table
// covers the codes rgpu itself returns, so a failed connection still explains itself.
#include <cuda.h>

#include <cstring>

#include "client/call.h"
#include "client/runtime.h"
#include "gen/export.gen.h"

namespace {

struct Local {
  CUresult code;
  const char* name;
  const char* text;
};

constexpr Local kLocal[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE",
     "CUDA-capable device(s) is/are busy or unavailable (rgpu: the server cannot be reached or refused us)"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const rgpu::proto::ErrorText* from_server(CUresult code) {
  if (!rgpu::client::connection()) return nullptr;
  for (const auto& e : rgpu::client::snapshot().errors)
    if (e.code == code) return &e;
  return nullptr;
}

const Local* local(CUresult code) {
  for (const Local& l : kLocal)
    if (l.code == code) return &l;
  return nullptr;
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  if (const auto* e = from_server(error)) {
    *pStr = e->name.c_str();
    return CUDA_SUCCESS;
  }
  if (const Local* l = local(error)) {
    *pStr = l->name;
    return CUDA_SUCCESS;
  }
  *pStr = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

RGPU_EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char** pStr) {
  if (!pStr) return CUDA_ERROR_INVALID_VALUE;
  if (const auto* e = from_server(error)) {
    *pStr = e->text.c_str();
    return CUDA_SUCCESS;
  }
  if (const Local* l = local(error)) {
    *pStr = l->text;
    return CUDA_SUCCESS;
  }
  *pStr = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

}  // extern "C"
