// JIT linking on the wire (layout in link.h).
#include "protocol/wire/link.h"

namespace rgpu::proto::wire {

bool jit_pointer_option(uint32_t o) {
  return o == CU_JIT_GLOBAL_SYMBOL_NAMES || o == CU_JIT_GLOBAL_SYMBOL_ADDRESSES ||
         o == CU_JIT_REFERENCED_KERNEL_NAMES || o == CU_JIT_REFERENCED_VARIABLE_NAMES;
}

void put_jit_options(Writer& w, size_t n, const CUjit_option* options, const uint64_t* values) {
  w.put_u32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) {
    w.put_u32(static_cast<uint32_t>(options[i]));
    w.put_u64(values[i]);
  }
}

void put_link_complete_head(Writer& w, size_t n_options, const CUjit_option* options, const uint64_t* values,
                            uint32_t n_inputs) {
  put_jit_options(w, n_options, options, values);
  w.put_u32(n_inputs);
}

void put_link_input(Writer& w, uint32_t type, const std::string& name, size_t n_options, const CUjit_option* options,
                    const uint64_t* values, const void* data, size_t len) {
  w.put_u32(type);
  w.put_str(name);
  put_jit_options(w, n_options, options, values);
  w.put_bytes(data, len);
}

namespace {

bool read_options(Reader& r, bool input, std::vector<JitOption>* out) {
  uint32_t n = r.u32();
  if (!r.ok() || n > kMaxJitOptions) return r.fail();
  out->resize(n);
  for (auto& [opt, v] : *out) opt = r.u32(), v = r.u64();
  if (!r.ok()) return false;
  for (const auto& [opt, v] : *out) {
    if (opt >= CU_JIT_NUM_OPTIONS || jit_pointer_option(opt)) return r.fail();  // a client of ours never sends these
    if ((opt == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES || opt == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) && v > kMaxLinkLog)
      return r.fail();
    if (input && (opt == CU_JIT_INFO_LOG_BUFFER || opt == CU_JIT_ERROR_LOG_BUFFER)) return r.fail();
  }
  return true;
}

}  // namespace

bool read_link_complete(Reader& r, LinkComplete* out) {
  if (!read_options(r, false, &out->options)) return false;
  uint32_t n = r.u32();
  // 20 bytes at the least an input (type, empty name, no options, u64 length): no count the
  // payload lacks sizes anything.
  if (!r.ok() || n > kMaxLinkInputs || n > r.left() / 20) return r.fail();
  out->inputs.resize(n);
  for (LinkInput& in : out->inputs) {
    in.type = r.u32();
    if (!r.ok() || in.type >= CU_JIT_NUM_INPUT_TYPES) return r.fail();
    in.name = r.str(4096);
    if (!r.ok() || !read_options(r, true, &in.options)) return r.fail();
    in.data = r.bytes(&in.len);
    if (!r.ok()) return false;
  }
  return true;
}

void put_link_result(Writer& w, bool with_cubin, const LinkResult& v) {
  w.put_u32(static_cast<uint32_t>(v.slots.size()));
  for (uint64_t s : v.slots) w.put_u64(s);
  w.put_str(v.info);
  w.put_str(v.error);
  if (with_cubin) w.put_bytes(v.cubin, v.cubin_len);
}

bool read_link_result(Reader& r, bool with_cubin, LinkResult* out) {
  uint32_t n = r.u32();
  if (!r.ok() || n > kMaxJitOptions) return r.fail();
  out->slots.resize(n);
  for (auto& s : out->slots) s = r.u64();
  out->info = r.str(kMaxLinkLog);
  out->error = r.str(kMaxLinkLog);
  if (with_cubin) out->cubin = r.bytes(&out->cubin_len);
  return r.ok();
}

}  // namespace rgpu::proto::wire
