// JIT linking on the wire: cuLinkComplete, which carries the client's whole link (a CUlinkState
// is a client object: cuLinkCreate and cuLinkAddData/File gather the options and inputs there;
// the server links them with its driver in one go and returns the cubin). Used by
// client/driver/link.cpp and server/handlers/link.cpp.
//
// Layout:
//  cuLinkComplete: JitOptions (the link's), u32 n inputs (at most kMaxLinkInputs), each: u32
//    CUjitInputType, str name (at most 4096 bytes), JitOptions (the input's: no log buffers,
//    whose memory may be gone by the time the inputs are linked), u64 len + len bytes.
//  JitOptions: u32 n (at most kMaxJitOptions), n × (u32 option, u64 value). A log buffer's value
//    is 0 (its size comes with its *_SIZE_BYTES option, at most kMaxLinkLog); options naming host
//    pointer arrays (jit_pointer_option) never travel: the client refuses them with
//    CUDA_ERROR_NOT_SUPPORTED.
//  Reply: CUresult, then (whatever the CUresult) u32 n × u64 slot values after linking (the link
//    options', which the client writes back into the caller's array as the driver would), str info
//    log, str error log (each at most kMaxLinkLog bytes), then (success) u64 len + len bytes of
//    cubin.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/wire.h"

namespace rgpu::proto::wire {

inline constexpr uint32_t kMaxJitOptions = 64;
inline constexpr uint32_t kMaxLinkInputs = 4096;
inline constexpr uint64_t kMaxLinkLog = 1 << 20;

// Options whose values point at arrays of host pointers (symbol names and addresses).
bool jit_pointer_option(uint32_t option);

void put_jit_options(Writer& w, size_t n, const CUjit_option* options, const uint64_t* values);
// The link's head (its options) and input count; then put_link_input for each input.
void put_link_complete_head(Writer& w, size_t n_options, const CUjit_option* options, const uint64_t* values,
                            uint32_t n_inputs);
void put_link_input(Writer& w, uint32_t type, const std::string& name, size_t n_options, const CUjit_option* options,
                    const uint64_t* values, const void* data, size_t len);

struct JitOption {
  uint32_t option;
  uint64_t value;
};
struct LinkInput {
  uint32_t type = 0;
  std::string name;
  std::vector<JitOption> options;
  const uint8_t* data = nullptr;  // into the message
  size_t len = 0;
};
struct LinkComplete {
  std::vector<JitOption> options;
  std::vector<LinkInput> inputs;
};
// Refuses unknown options and input types, pointer-array options, log buffers among an input's
// options, log sizes over kMaxLinkLog and counts over the limits.
bool read_link_complete(Reader& r, LinkComplete* out);

struct LinkResult {
  std::vector<uint64_t> slots;
  std::string info, error;
  const uint8_t* cubin = nullptr;  // into the message; success only
  size_t cubin_len = 0;
};
// with_cubin: the CUresult was CUDA_SUCCESS.
void put_link_result(Writer& w, bool with_cubin, const LinkResult& v);
bool read_link_result(Reader& r, bool with_cubin, LinkResult* out);

}  // namespace rgpu::proto::wire
