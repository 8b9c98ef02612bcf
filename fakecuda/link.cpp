// JIT linking, as far as a driver that compiles nothing can: cuLinkAddData/AddFile accept an
// image common/cuda_image can parse (cubin, fatbin, PTX) and refuse anything else with
// CUDA_ERROR_INVALID_PTX (PTX input) or CUDA_ERROR_INVALID_IMAGE and a line in the error log;
// cuLinkComplete hands back the one input unchanged (PTX stays PTX, which cuModuleLoadData
// takes) and says so in the info log. Linking two or more inputs → CUDA_ERROR_NOT_SUPPORTED.
// Log buffers and the overwritten option slots (log sizes, wall time) behave as the driver's.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fakecuda/internal.h"

using namespace fake;

namespace {

struct Link {
  std::vector<CUjit_option> opts;
  void** values = nullptr;
  char* info = nullptr;
  char* error = nullptr;
  size_t info_size = 0, error_size = 0;
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<std::string> names;
  std::vector<uint8_t> out;
};

std::mutex& g_link_mu = *new std::mutex;
auto& g_links = *new std::vector<Link*>();

Link* live(CUlinkState s) {
  for (Link* l : g_links)
    if (reinterpret_cast<CUlinkState>(l) == s) return l;
  return nullptr;
}

// Writes a log and its size slot, as the driver does.
void write_log(Link* l, bool error, const std::string& text) {
  char* buf = error ? l->error : l->info;
  size_t size = error ? l->error_size : l->info_size;
  if (!buf || !size) return;
  size_t n = std::min(text.size(), size - 1);
  std::memcpy(buf, text.data(), n);
  buf[n] = 0;
  CUjit_option slot = error ? CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES : CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES;
  for (size_t i = 0; i < l->opts.size(); ++i)
    if (l->opts[i] == slot) l->values[i] = reinterpret_cast<void*>(static_cast<uintptr_t>(n + 1));
}

CUresult add(CUlinkState state, CUjitInputType type, const void* data, size_t size, const char* name) {
  std::lock_guard lk(g_link_mu);
  Link* l = live(state);
  if (!l) return CUDA_ERROR_INVALID_HANDLE;
  if (!data || !size || type >= CU_JIT_NUM_INPUT_TYPES) return CUDA_ERROR_INVALID_VALUE;
  rgpu::image::Image img;
  std::string err;
  if (!rgpu::image::parse(data, size, &img, &err) || img.kernels.empty()) {
    write_log(l, true, std::string("fakecuda: cannot link ") + (name ? name : "input") + ": " +
                           (err.empty() ? "no kernels in the image" : err));
    return type == CU_JIT_INPUT_PTX ? CUDA_ERROR_INVALID_PTX : CUDA_ERROR_INVALID_IMAGE;
  }
  const auto* p = static_cast<const uint8_t*>(data);
  l->inputs.emplace_back(p, p + size);
  l->names.push_back(name ? name : "");
  return CUDA_SUCCESS;
}

}  // namespace

FAKE_API CUresult CUDAAPI cuLinkCreate_v2(unsigned int n, CUjit_option* opts, void** values, CUlinkState* out) {
  if (CUresult r = check_init()) return r;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  if (!out || (n && (!opts || !values))) return CUDA_ERROR_INVALID_VALUE;
  auto* l = new Link;
  l->opts.assign(opts, opts + n);
  l->values = values;
  for (unsigned i = 0; i < n; ++i) {
    uintptr_t v = reinterpret_cast<uintptr_t>(values[i]);
    if (opts[i] == CU_JIT_INFO_LOG_BUFFER) l->info = static_cast<char*>(values[i]);
    if (opts[i] == CU_JIT_ERROR_LOG_BUFFER) l->error = static_cast<char*>(values[i]);
    if (opts[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES) l->info_size = static_cast<unsigned>(v);
    if (opts[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) l->error_size = static_cast<unsigned>(v);
  }
  std::lock_guard lk(g_link_mu);
  g_links.push_back(l);
  *out = reinterpret_cast<CUlinkState>(l);
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuLinkCreate(unsigned int n, CUjit_option* opts, void** values, CUlinkState* out) {
  return cuLinkCreate_v2(n, opts, values, out);
}

FAKE_API CUresult CUDAAPI cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void* data, size_t size,
                                           const char* name, unsigned int, CUjit_option*, void**) {
  return add(state, type, data, size, name);
}

FAKE_API CUresult CUDAAPI cuLinkAddData(CUlinkState state, CUjitInputType type, void* data, size_t size,
                                        const char* name, unsigned int n, CUjit_option* o, void** v) {
  return cuLinkAddData_v2(state, type, data, size, name, n, o, v);
}

FAKE_API CUresult CUDAAPI cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char* path, unsigned int,
                                           CUjit_option*, void**) {
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream f(path, std::ios::binary);
  if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (type == CU_JIT_INPUT_PTX) bytes.push_back(0);
  return add(state, type, bytes.data(), bytes.size(), path);
}

FAKE_API CUresult CUDAAPI cuLinkAddFile(CUlinkState state, CUjitInputType type, const char* path, unsigned int n,
                                        CUjit_option* o, void** v) {
  return cuLinkAddFile_v2(state, type, path, n, o, v);
}

FAKE_API CUresult CUDAAPI cuLinkComplete(CUlinkState state, void** cubinOut, size_t* sizeOut) {
  std::lock_guard lk(g_link_mu);
  Link* l = live(state);
  if (!l) return CUDA_ERROR_INVALID_HANDLE;
  if (!cubinOut || !sizeOut) return CUDA_ERROR_INVALID_VALUE;
  if (l->inputs.empty()) {
    write_log(l, true, "fakecuda: nothing to link");
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (l->inputs.size() > 1) {
    std::fprintf(stderr, "fakecuda: linking %zu inputs is not supported (the fake links one image)\n",
                 l->inputs.size());
    write_log(l, true, "fakecuda: linking more than one input is not supported");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  l->out = l->inputs[0];
  write_log(l, false, "fakecuda: linked " + (l->names[0].empty() ? std::string("1 input") : l->names[0]));
  for (size_t i = 0; i < l->opts.size(); ++i)
    if (l->opts[i] == CU_JIT_WALL_TIME) {
      float ms = 0.5f;
      l->values[i] = nullptr;
      std::memcpy(&l->values[i], &ms, sizeof ms);
    }
  *cubinOut = l->out.data();
  *sizeOut = l->out.size();
  return CUDA_SUCCESS;
}

FAKE_API CUresult CUDAAPI cuLinkDestroy(CUlinkState state) {
  std::lock_guard lk(g_link_mu);
  Link* l = live(state);
  if (!l) return CUDA_ERROR_INVALID_HANDLE;
  g_links.erase(std::find(g_links.begin(), g_links.end(), l));
  delete l;
  return CUDA_SUCCESS;
}
