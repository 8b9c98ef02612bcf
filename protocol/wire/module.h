// Loading code on the wire: module and library images (cuModuleLoad*, cuLibraryLoad*), loads by
// hash from the server's module cache (kOpModuleByHash), symbol lookups (cuModuleGetFunction,
// cuLibraryGetKernel), unloads and names (cuFuncGetName, cuKernelGetName). Used by
// client/modules.cpp, client/driver/module.cpp and client/driver/library.cpp, and by
// server/handlers/module.cpp, server/handlers/library.cpp and server/handlers/control.cpp.
// Modules, libraries, functions and kernels are named by ids the client mints, so a load and a
// lookup can be one-way (client/modules.cpp says when).
//
// Layout:
//  ImageLoad (cuModuleLoadData, and cuModuleLoad, cuModuleLoadDataEx, cuModuleLoadFatBinary,
//    which travel as it; cuLibraryLoadData, and cuLibraryLoadFromFile as it): u64 module or
//    library id, u64 n, n bytes of image (attached behind the head by the client, never copied).
//    A file is read on the client (it names a client path). JIT and library options are not
//    sent: they carry host pointers (log buffers, the host function table) that mean nothing on
//    the server. Reply: CUresult.
//  kOpModuleByHash: u64 module or library id, u16 the load op it stands for (cuModuleLoadData or
//    cuLibraryLoadData), 32 bytes SHA-256 of the image. Reply: CUresult; CUDA_ERROR_NOT_FOUND
//    when the server's cache lacks the image (then the client sends the bytes).
//  SymbolLookup (cuModuleGetFunction, cuLibraryGetKernel): u64 new function or kernel id, u64
//    module or library id, str name (at most kMaxSymbolName bytes). Reply: CUresult.
//  cuModuleUnload: u64 module id. One-way.
//  cuFuncGetName, cuKernelGetName (asked only when the client does not know the name): u64
//    function or kernel id. Reply: CUresult, str name (at most kMaxSymbolName bytes).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/wire.h"

namespace rgpu::proto::wire {

inline constexpr size_t kMaxSymbolName = 4096;

// The head of an image load; the n image bytes follow (attached by the caller).
void put_image_load_head(Writer& w, uint64_t id, uint64_t n);
struct ImageLoad {
  uint64_t id = 0;
  const uint8_t* image = nullptr;  // into the message
  size_t n = 0;
};
bool read_image_load(Reader& r, ImageLoad* out);

struct ModuleByHash {
  uint64_t id = 0;
  uint16_t load_op = 0;
  std::array<uint8_t, 32> hash{};
};
void put_module_by_hash(Writer& w, const ModuleByHash& v);
bool read_module_by_hash(Reader& r, ModuleByHash* out);

struct SymbolLookup {
  uint64_t id = 0, parent = 0;
  std::string name;
};
void put_symbol_lookup(Writer& w, uint64_t id, uint64_t parent, const char* name);
bool read_symbol_lookup(Reader& r, SymbolLookup* out);

// cuModuleUnload, and cuFuncGetName/cuKernelGetName's request: one id.
void put_id(Writer& w, uint64_t id);
bool read_id(Reader& r, uint64_t* id);

// cuFuncGetName and cuKernelGetName's reply after the CUresult.
void put_symbol_name(Writer& w, const char* name);
bool read_symbol_name(Reader& r, std::string* name);

}  // namespace rgpu::proto::wire
