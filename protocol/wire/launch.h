// Kernel launches and their arguments on the wire: cuLaunchKernel, cuLaunchCooperativeKernel,
// cuLaunchKernelEx (each with _ptsz), and LaunchArgs, the packed kernel arguments that graph
// kernel nodes carry too (protocol/wire/graph.h). Used by the client's encoder
// (client/driver/launch.cpp) and the server's decoder (server/handlers/launch.cpp).
//
// Layout (all integers little-endian, common/wire.h):
//   cuLaunchKernel, cuLaunchCooperativeKernel (and _ptsz):
//     u64 function, u32 grid x y z, u32 block x y z, u32 shared bytes, u64 stream, LaunchArgs
//   cuLaunchKernelEx (and _ptsz):
//     u64 function, u32 grid x y z, u32 block x y z, u32 shared bytes, u64 stream,
//     u32 n attrs (at most kMaxLaunchAttrs), n × CUlaunchAttribute (events inside travel as
//     client ids), LaunchArgs
//   Reply: CUresult only; launches are one-way (their error comes with the next reply).
//   cuFuncGetParamInfo: u64 function, u64 index. Reply: CUresult, u64 offset, u64 size. (The
//     client asks only for layouts it could not read from the image, and kOpParamLayout,
//     protocol/messages.h, asks for a whole layout in one round trip.)
//   kOpParamLayout: u64 function or kernel id, u8 ParamKind. Reply: CUresult; on success u32 n
//     (at most kMaxParamLayout, protocol/messages.h), n × (u64 offset, u64 size), i32 the
//     driver's answer for parameter n, u8 the kind that answered (0 or 1).
//   kOpFuncAttributes: u64 function or kernel id, u8 kind (0 a CUfunction, 1 a CUkernel), i32
//     device (the server's ordinal; kernels only). Reply: CUresult; on success u32 n (at most
//     kMaxFuncAttributes), n × (i32 attribute, i32 the driver's result, i32 value).
//   LaunchArgs: u32 n params (at most kMaxParams), n × (u32 offset, u32 size), u64 len, len
//     bytes of packed arguments. n = 0 with len > 0 is the caller's `extra` buffer: the server
//     passes it as CU_LAUNCH_PARAM_BUFFER_POINTER. The client packs by the kernel's layout from
//     its module image (client/modules.h) or asked from the server once; the server checks the
//     buffer against the driver's own layout before the driver sees a pointer into it. Packed
//     arguments are written straight into the call's buffer (this runs on every launch), so the
//     encoder hands back where they go instead of taking a copy.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/wire.h"

namespace rgpu::proto::wire {

inline constexpr uint32_t kMaxParams = 4096;
inline constexpr uint32_t kMaxLaunchAttrs = 64;

struct ParamSlot {
  uint32_t offset;
  uint32_t size;
};

// Decoded LaunchArgs. After bind(), params() or extras() is what the driver call takes. Not
// copyable or movable: extra[1] points at the bytes and extra[3] at extra_len.
struct KernelArgs {
  KernelArgs() = default;
  KernelArgs(const KernelArgs&) = delete;
  KernelArgs& operator=(const KernelArgs&) = delete;

  std::vector<ParamSlot> slots;     // as sent
  const uint8_t* packed = nullptr;  // into the message, or into owned after own()
  size_t packed_len = 0;
  std::vector<void*> ptrs;  // one per parameter (the kernelParams form)
  size_t extra_len = 0;     // > 0: the `extra` form, a CU_LAUNCH_PARAM_BUFFER_POINTER over packed
  void* extra[5] = {};

  // Copies the packed bytes out of the message, for arguments kept after it is gone.
  void own();
  // Points ptrs at each slot over the packed bytes, or builds the `extra` form (n = 0, len > 0).
  // False when a slot lies outside the bytes (the caller answers CUDA_ERROR_INVALID_VALUE).
  bool bind();
  void** params() { return extra_len || ptrs.empty() ? nullptr : ptrs.data(); }
  void** extras() { return extra_len ? extra : nullptr; }

 private:
  std::vector<uint8_t> owned_;
};

// LaunchArgs, kernelParams form: writes the slots and a zeroed buffer of `bytes` and returns the
// buffer's offset in w.buf(), for the caller to copy each argument to its slot. Slots is any
// range of values with uint32_t `offset` and `size` members.
template <class Slots>
size_t put_packed_args(Writer& w, const Slots& slots, uint64_t bytes) {
  w.put_u32(static_cast<uint32_t>(std::size(slots)));
  for (const auto& s : slots) {
    w.put_u32(s.offset);
    w.put_u32(s.size);
  }
  w.put_u64(bytes);
  size_t at = w.size();
  w.buf().resize(at + bytes);
  return at;
}
// LaunchArgs, `extra` form: the caller's CU_LAUNCH_PARAM_BUFFER_POINTER bytes.
void put_extra_args(Writer& w, const void* buf, size_t n);
// Reads LaunchArgs (not yet bound). False when malformed (r.ok() is then false).
bool read_launch_args(Reader& r, KernelArgs* a);

struct LaunchDims {
  uint32_t grid[3] = {};
  uint32_t block[3] = {};
  uint32_t shared_bytes = 0;
};

// The head of every launch, up to LaunchArgs (which the caller appends): attrs only for
// cuLaunchKernelEx (with_attrs), at most kMaxLaunchAttrs of them, their events as client ids.
void put_launch_head(Writer& w, uint64_t function, const LaunchDims& dims, uint64_t stream);
void put_launch_ex_head(Writer& w, uint64_t function, const LaunchDims& dims, uint64_t stream,
                        const CUlaunchAttribute* attrs, uint32_t n_attrs);

struct Launch {
  uint64_t function = 0;
  LaunchDims dims;
  uint64_t stream = 0;
  std::vector<CUlaunchAttribute> attrs;  // cuLaunchKernelEx only
  KernelArgs args;                       // not yet bound
};
// Reads a whole launch request. False when malformed.
bool read_launch(Reader& r, Launch* l, bool with_attrs);
// Reads only the head (everything before LaunchArgs; cluster occupancy queries send just it).
bool read_launch_head(Reader& r, Launch* l, bool with_attrs);

// kOpParamLayout.
enum class ParamKind : uint8_t { kFunction = 0, kKernel = 1, kEither = 2 };
struct ParamLayoutAsk {
  uint64_t id = 0;
  uint8_t kind = 0;  // a ParamKind; the server answers CUDA_ERROR_INVALID_VALUE past kEither
};
void put_param_layout_ask(Writer& w, const ParamLayoutAsk& v);
bool read_param_layout_ask(Reader& r, ParamLayoutAsk* out);
struct ParamLayout {
  std::vector<std::pair<uint64_t, uint64_t>> params;  // (offset, size) of parameters 0..n-1
  int32_t end = 0;                                     // the driver's answer for parameter n
  uint8_t answered = 0;                                // the kind that answered: 0 or 1
};
void put_param_layout(Writer& w, const ParamLayout& v);
bool read_param_layout(Reader& r, ParamLayout* out);

// kOpFuncAttributes.
struct FuncAttributesAsk {
  uint64_t id = 0;
  uint8_t kind = 0;  // 0 a CUfunction, 1 a CUkernel
  int32_t device = 0;
};
void put_func_attributes_ask(Writer& w, const FuncAttributesAsk& v);
bool read_func_attributes_ask(Reader& r, FuncAttributesAsk* out);
struct FuncAttribute {
  int32_t attribute, result, value;
};
void put_func_attributes(Writer& w, const std::vector<FuncAttribute>& v);
bool read_func_attributes(Reader& r, std::vector<FuncAttribute>* out);

struct ParamInfo {
  uint64_t function = 0, index = 0;
};
void put_param_info(Writer& w, const ParamInfo& v);
bool read_param_info(Reader& r, ParamInfo* out);
void put_param_info_reply(Writer& w, uint64_t offset, uint64_t size);
bool read_param_info_reply(Reader& r, uint64_t* offset, uint64_t* size);

}  // namespace rgpu::proto::wire
