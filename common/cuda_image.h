// Reads CUDA module images as plain bytes: fatbins, ELF cubins and PTX text. No CUDA headers.
//
// Two users. The client shim learns each kernel's parameter layout from the image it is about to
// send, so the first launch of a kernel needs no round trip to ask for it (docs/design.md §3). The
// fake driver learns which kernels a module holds and how to unpack their arguments.
//
// Contracts:
// - Every function reads at most max_len / len bytes from data and never crashes, whatever the
//   bytes are (the fuzz target common/cuda_image_fuzz.cpp holds it to that).
// - A fatbin *wrapper* (__fatBinC_Wrapper_t, what nvcc registers) holds a pointer into the
//   caller's process. Nothing here follows it: detect() names it and fatbin_wrapper_data() returns
//   the pointer it holds, for a caller that knows the wrapper is its own.
// - Layouts are the same for every architecture, so parse() uses whichever sm_ cubin of a fatbin
//   parses first and falls back to its PTX.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rgpu::image {

struct Param {
  uint32_t ordinal;  // position in the kernel's signature, from 0
  uint32_t offset;   // byte offset in the parameter buffer
  uint32_t size;     // bytes
};

struct Kernel {
  std::string name;           // as in the image (mangled unless extern "C")
  std::vector<Param> params;  // sorted by ordinal, one per parameter
  uint32_t param_bytes = 0;   // size of the whole parameter buffer (end of the last parameter)
  // False when the image gives the buffer's size but describes its parameters in records this
  // reader does not know: params is then empty and only the driver can say where they go.
  bool layout_known = true;
};

// A module-scope variable of a cubin (`__device__`, `__constant__`): an ELF object symbol in a
// .nv.global or .nv.constant section. Read for the fake driver, which places them in memory.
struct Global {
  std::string name;
  uint64_t size = 0;
  bool constant = false;  // in a .nv.constant section (`__constant__`)
  uint64_t offset = 0;    // the symbol's value: its offset in that section
};

struct Image {
  std::vector<Kernel> kernels;  // in image order
  std::vector<Global> globals;  // cubins only (not read from PTX)
  // The kernels came from machine code the GPU runs as is: a bare cubin, or a fatbin's cubins
  // for the architecture parse() was asked for. False for PTX (the driver must JIT it, which can
  // fail) and for a fatbin with no cubin for that architecture.
  bool native = false;
  const Kernel* find(const std::string& name) const;
};

enum class Kind { kFatbinWrapper, kFatbin, kCubin, kPtx, kUnknown };
const char* kind_name(Kind k);

inline constexpr uint32_t kFatbinWrapperMagic = 0x466243B1;
inline constexpr uint32_t kFatbinMagic = 0xBA55ED50;

// What data holds, from its first bytes. PTX is text whose first token (after whitespace and
// comments) starts with '.'; anything else unrecognised is kUnknown.
Kind detect(const void* data, size_t max_len);

// Length of a self-delimiting image: a fatbin's header plus payload, an ELF's furthest extent
// (headers, sections, segments), PTX's text plus its NUL; 0 when unknown, malformed or longer
// than max_len. Pass SIZE_MAX when the caller has only a pointer (cuModuleLoadData): then the
// image itself must be well formed, as the driver requires too.
size_t image_size(const void* data, size_t max_len);

// The fatbin pointer a wrapper holds, or nullptr when data is not a wrapper. Not dereferenced.
const void* fatbin_wrapper_data(const void* data, size_t max_len);

// Kernels and their parameter layouts. For a fatbin: the first ELF entry that parses (LZ4 or
// zstd compressed entries are decompressed), else the first PTX entry. Returns false with a
// one-line reason in *err (when err is not null) for malformed input or a wrapper.
bool parse(const void* data, size_t len, Image* out, std::string* err);
// The same for a GPU of compute capability sm (90 for 9.0): from a fatbin, the kernels of every
// cubin built for that architecture (libraries spread theirs over several entries).
bool parse(const void* data, size_t len, uint32_t sm, Image* out, std::string* err);

}  // namespace rgpu::image
