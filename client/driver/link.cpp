// JIT linking (cuLinkCreate, cuLinkAddData, cuLinkAddFile, cuLinkComplete, cuLinkDestroy). A
// CUlinkState is a client object: inputs are gathered here (cuLinkAddFile reads the client's
// file) and cuLinkComplete sends them all at once; the server links them with its driver and
// returns the linked cubin, which stays here until cuLinkDestroy, as the driver's copy would.
// The image then loads through cuModuleLoadData like any other (its layouts come from the cubin).
//
// JIT options hold pointers: the log buffers (CU_JIT_INFO_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER)
// are the caller's, kept from cuLinkCreate and filled at cuLinkComplete with what the server's
// linker wrote; the option slots the driver overwrites (log sizes, CU_JIT_WALL_TIME,
// CU_JIT_THREADS_PER_BLOCK) are written back into the caller's optionValues array, as the driver
// does. Options naming host pointer arrays (global symbol names and addresses, referenced
// kernel/variable names) are refused with CUDA_ERROR_NOT_SUPPORTED. Per-input options keep their
// scalar values; their log buffers are not filled (the inputs are linked after the call that
// named them has returned, when such a buffer may be gone). Because inputs are checked only at
// cuLinkComplete, a bad input is reported there, not by cuLinkAddData.
//
// Wire layout: protocol/wire/link.h.
#include <cuda.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "client/call.h"
#include "common/log.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"
#include "protocol/wire/link.h"

namespace {

using rgpu::client::Call;

namespace wire = rgpu::proto::wire;
constexpr uint32_t kMaxOptions = wire::kMaxJitOptions;
constexpr size_t kMaxLog = wire::kMaxLinkLog;

struct Options {
  std::vector<CUjit_option> opts;
  std::vector<uint64_t> values;
};

struct Input {
  CUjitInputType type;
  std::string name;
  Options options;
  std::vector<uint8_t> data;
};

struct LinkState {
  Options options;
  unsigned n_user = 0;
  CUjit_option* user_opts = nullptr;  // the caller's arrays, written back at completion
  void** user_values = nullptr;
  char* info_log = nullptr;
  char* error_log = nullptr;
  size_t info_size = 0, error_size = 0;
  std::vector<Input> inputs;
  std::vector<uint8_t> cubin;
};

// Reads a caller's option arrays. keep_logs: record the log buffers (cuLinkCreate); otherwise
// drop them (per-input options).
CUresult read_options(const char* name, unsigned n, CUjit_option* opts, void** values, Options* out,
                      LinkState* logs) {
  if (n && (!opts || !values)) return CUDA_ERROR_INVALID_VALUE;
  if (n > kMaxOptions) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n; ++i) {
    CUjit_option o = opts[i];
    if (wire::jit_pointer_option(o)) {
      rgpu::log::error("%s: JIT option %d names host pointers the GPU server cannot read; not supported by rgpu "
                       "(returning CUDA_ERROR_NOT_SUPPORTED)",
                       name, static_cast<int>(o));
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    uint64_t v = reinterpret_cast<uintptr_t>(values[i]);
    if (o == CU_JIT_INFO_LOG_BUFFER || o == CU_JIT_ERROR_LOG_BUFFER) {
      if (!logs) continue;  // a per-input log buffer: not filled (see the file comment)
      (o == CU_JIT_INFO_LOG_BUFFER ? logs->info_log : logs->error_log) = static_cast<char*>(values[i]);
      v = 0;
    } else if (o == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES || o == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) {
      if (!logs) continue;
      v = static_cast<unsigned>(v);  // an unsigned int in the slot
      if (v > kMaxLog) v = kMaxLog;
      (o == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES ? logs->info_size : logs->error_size) = v;
    } else if (o == CU_JIT_WALL_TIME) {
      if (!logs) continue;
      v = 0;  // an output the driver writes over the slot; never this process's pointer
    }
    out->opts.push_back(o);
    out->values.push_back(v);
  }
  return CUDA_SUCCESS;
}

void copy_log(const std::string& text, char* buf, size_t size) {
  if (!buf || !size) return;
  size_t n = std::min(text.size(), size - 1);
  std::memcpy(buf, text.data(), n);
  buf[n] = 0;
}

CUresult create(const char* name, unsigned n, CUjit_option* opts, void** values, CUlinkState* out) {
  rgpu::client::trace_call(name);
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  auto* s = new LinkState;
  if (CUresult rc = read_options(name, n, opts, values, &s->options, s)) {
    delete s;
    return rc;
  }
  s->n_user = n;
  s->user_opts = opts;
  s->user_values = values;
  *out = reinterpret_cast<CUlinkState>(s);
  return CUDA_SUCCESS;
}

CUresult add_input(const char* name, CUlinkState state, CUjitInputType type, std::vector<uint8_t> data,
                   const char* input_name, unsigned n, CUjit_option* opts, void** values) {
  auto* s = reinterpret_cast<LinkState*>(state);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (static_cast<unsigned>(type) >= CU_JIT_NUM_INPUT_TYPES) return CUDA_ERROR_INVALID_VALUE;
  Input in{type, input_name ? input_name : "", {}, std::move(data)};
  if (CUresult rc = read_options(name, n, opts, values, &in.options, nullptr)) return rc;
  s->inputs.push_back(std::move(in));
  return CUDA_SUCCESS;
}

CUresult add_data(const char* name, CUlinkState state, CUjitInputType type, void* data, size_t size,
                  const char* input_name, unsigned n, CUjit_option* opts, void** values) {
  rgpu::client::trace_call(name);
  if (!data || !size) return CUDA_ERROR_INVALID_VALUE;
  const auto* p = static_cast<const uint8_t*>(data);
  return add_input(name, state, type, std::vector<uint8_t>(p, p + size), input_name, n, opts, values);
}

CUresult add_file(const char* name, CUlinkState state, CUjitInputType type, const char* path, unsigned n,
                  CUjit_option* opts, void** values) {
  rgpu::client::trace_call(name);
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream f(path, std::ios::binary);
  if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.empty()) return CUDA_ERROR_INVALID_VALUE;
  if (type == CU_JIT_INPUT_PTX) bytes.push_back(0);  // PTX is text; the driver reads up to its NUL
  return add_input(name, state, type, std::move(bytes), path, n, opts, values);
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuLinkCreate_v2(unsigned int n, CUjit_option* opts, void** values, CUlinkState* out) {
  return create("cuLinkCreate_v2", n, opts, values, out);
}

RGPU_EXPORT CUresult CUDAAPI cuLinkCreate(unsigned int n, CUjit_option* opts, void** values, CUlinkState* out) {
  return create("cuLinkCreate", n, opts, values, out);
}

RGPU_EXPORT CUresult CUDAAPI cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void* data, size_t size,
                                              const char* name, unsigned int n, CUjit_option* opts, void** values) {
  return add_data("cuLinkAddData_v2", state, type, data, size, name, n, opts, values);
}

RGPU_EXPORT CUresult CUDAAPI cuLinkAddData(CUlinkState state, CUjitInputType type, void* data, size_t size,
                                           const char* name, unsigned int n, CUjit_option* opts, void** values) {
  return add_data("cuLinkAddData", state, type, data, size, name, n, opts, values);
}

RGPU_EXPORT CUresult CUDAAPI cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char* path,
                                              unsigned int n, CUjit_option* opts, void** values) {
  return add_file("cuLinkAddFile_v2", state, type, path, n, opts, values);
}

RGPU_EXPORT CUresult CUDAAPI cuLinkAddFile(CUlinkState state, CUjitInputType type, const char* path, unsigned int n,
                                           CUjit_option* opts, void** values) {
  return add_file("cuLinkAddFile", state, type, path, n, opts, values);
}

RGPU_EXPORT CUresult CUDAAPI cuLinkComplete(CUlinkState state, void** cubin_out, size_t* size_out) {
  rgpu::client::trace_call("cuLinkComplete");
  auto* s = reinterpret_cast<LinkState*>(state);
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (!cubin_out || !size_out) return CUDA_ERROR_INVALID_VALUE;
  Call c(rgpu::op::cuLinkComplete, rgpu::client::kWaits);
  wire::put_link_complete_head(c.args(), s->options.opts.size(), s->options.opts.data(), s->options.values.data(),
                               static_cast<uint32_t>(s->inputs.size()));
  for (const Input& in : s->inputs)
    wire::put_link_input(c.args(), static_cast<uint32_t>(in.type), in.name, in.options.opts.size(),
                         in.options.opts.data(), in.options.values.data(), in.data.data(), in.data.size());
  CUresult rc = c.invoke();
  wire::LinkResult got;
  const bool decoded = wire::read_link_result(c.reply(), rc == CUDA_SUCCESS, &got);
  const uint32_t n = static_cast<uint32_t>(got.slots.size());
  if (decoded && n == s->options.opts.size()) {
    const std::vector<uint64_t>& slots = got.slots;
    {
      copy_log(got.info, s->info_log, s->info_size);
      copy_log(got.error, s->error_log, s->error_size);
      // Write back the slots the driver overwrites, in the caller's array (the options were
      // read from it in order, skipping none of these).
      size_t k = 0;
      for (unsigned i = 0; i < s->n_user && k < n; ++i) {
        CUjit_option o = s->user_opts[i];
        if (o != s->options.opts[k]) continue;
        if (o == CU_JIT_WALL_TIME || o == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES ||
            o == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES || o == CU_JIT_THREADS_PER_BLOCK)
          s->user_values[i] = reinterpret_cast<void*>(static_cast<uintptr_t>(slots[k]));
        ++k;
      }
    }
  }
  if (rc != CUDA_SUCCESS) return rc;
  if (!decoded || !got.cubin_len) return CUDA_ERROR_UNKNOWN;
  s->cubin.assign(got.cubin, got.cubin + got.cubin_len);
  *cubin_out = s->cubin.data();
  *size_out = s->cubin.size();
  return CUDA_SUCCESS;
}

RGPU_EXPORT CUresult CUDAAPI cuLinkDestroy(CUlinkState state) {
  rgpu::client::trace_call("cuLinkDestroy");
  if (!state) return CUDA_ERROR_INVALID_HANDLE;
  delete reinterpret_cast<LinkState*>(state);
  return CUDA_SUCCESS;
}

}  // extern "C"
