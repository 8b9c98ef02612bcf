// Launches and LaunchArgs (layout in launch.h).
#include "protocol/wire/launch.h"

#include "protocol/messages.h"

namespace rgpu::proto::wire {

void KernelArgs::own() {
  owned_.assign(packed, packed + packed_len);
  packed = owned_.data();
}

bool KernelArgs::bind() {
  ptrs.clear();
  extra_len = 0;
  for (const ParamSlot& s : slots) {
    if (static_cast<uint64_t>(s.offset) + s.size > packed_len) return false;
    ptrs.push_back(const_cast<uint8_t*>(packed) + s.offset);
  }
  if (slots.empty() && packed_len > 0) {
    extra_len = packed_len;
    extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
    extra[1] = const_cast<uint8_t*>(packed);
    extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
    extra[3] = &extra_len;
    extra[4] = CU_LAUNCH_PARAM_END;
  }
  return true;
}

void put_extra_args(Writer& w, const void* buf, size_t n) {
  w.put_u32(0);
  w.put_bytes(buf, buf ? n : 0);
}

bool read_launch_args(Reader& r, KernelArgs* a) {
  uint32_t n = r.u32();
  if (!r.ok() || n > kMaxParams || n > r.left() / 8) return r.fail();
  a->slots.resize(n);
  for (ParamSlot& s : a->slots) {
    s.offset = r.u32();
    s.size = r.u32();
  }
  a->packed = r.bytes(&a->packed_len);
  return r.ok();
}

namespace {
void put_head(Writer& w, uint64_t function, const LaunchDims& dims, uint64_t stream) {
  w.put_u64(function);
  for (uint32_t v : dims.grid) w.put_u32(v);
  for (uint32_t v : dims.block) w.put_u32(v);
  w.put_u32(dims.shared_bytes);
  w.put_u64(stream);
}
}  // namespace

void put_launch_head(Writer& w, uint64_t function, const LaunchDims& dims, uint64_t stream) {
  put_head(w, function, dims, stream);
}

void put_launch_ex_head(Writer& w, uint64_t function, const LaunchDims& dims, uint64_t stream,
                        const CUlaunchAttribute* attrs, uint32_t n_attrs) {
  put_head(w, function, dims, stream);
  w.put_u32(n_attrs);
  for (uint32_t i = 0; i < n_attrs; ++i) w.put(attrs[i]);
}

bool read_launch(Reader& r, Launch* l, bool with_attrs) {
  return read_launch_head(r, l, with_attrs) && read_launch_args(r, &l->args);
}

bool read_launch_head(Reader& r, Launch* l, bool with_attrs) {
  l->function = r.u64();
  for (uint32_t& v : l->dims.grid) v = r.u32();
  for (uint32_t& v : l->dims.block) v = r.u32();
  l->dims.shared_bytes = r.u32();
  l->stream = r.u64();
  if (with_attrs) {
    uint32_t n = r.u32();
    if (!r.ok() || n > kMaxLaunchAttrs) return r.fail();
    l->attrs.resize(n);
    for (auto& a : l->attrs) a = r.get<CUlaunchAttribute>();
  }
  return r.ok();
}

void put_param_layout_ask(Writer& w, const ParamLayoutAsk& v) {
  w.put_u64(v.id);
  w.put_u8(v.kind);
}

bool read_param_layout_ask(Reader& r, ParamLayoutAsk* out) {
  out->id = r.u64();
  out->kind = r.u8();
  return r.ok();
}

void put_param_layout(Writer& w, const ParamLayout& v) {
  w.put_u32(static_cast<uint32_t>(v.params.size()));
  for (const auto& [offset, size] : v.params) {
    w.put_u64(offset);
    w.put_u64(size);
  }
  w.put<int32_t>(v.end);
  w.put_u8(v.answered);
}

bool read_param_layout(Reader& r, ParamLayout* out) {
  uint32_t n = r.u32();
  if (!r.ok() || n > kMaxParamLayout || n > r.left() / 16) return r.fail();
  out->params.resize(n);
  for (auto& [offset, size] : out->params) {
    offset = r.u64();
    size = r.u64();
  }
  out->end = r.i32();
  out->answered = r.u8();
  if (!r.ok() || out->answered > 1) return r.fail();
  return true;
}

void put_func_attributes_ask(Writer& w, const FuncAttributesAsk& v) {
  w.put_u64(v.id);
  w.put_u8(v.kind);
  w.put<int32_t>(v.device);
}

bool read_func_attributes_ask(Reader& r, FuncAttributesAsk* out) {
  out->id = r.u64();
  out->kind = r.u8();
  out->device = r.i32();
  return r.ok();
}

void put_func_attributes(Writer& w, const std::vector<FuncAttribute>& v) {
  w.put_u32(static_cast<uint32_t>(v.size()));
  for (const FuncAttribute& a : v) {
    w.put<int32_t>(a.attribute);
    w.put<int32_t>(a.result);
    w.put<int32_t>(a.value);
  }
}

bool read_func_attributes(Reader& r, std::vector<FuncAttribute>* out) {
  uint32_t n = r.u32();
  if (!r.ok() || n > kMaxFuncAttributes) return r.fail();
  out->resize(n);
  for (FuncAttribute& a : *out) {
    a.attribute = r.i32();
    a.result = r.i32();
    a.value = r.i32();
  }
  return r.ok();
}

void put_param_info(Writer& w, const ParamInfo& v) {
  w.put_u64(v.function);
  w.put_u64(v.index);
}

bool read_param_info(Reader& r, ParamInfo* out) {
  out->function = r.u64();
  out->index = r.u64();
  return r.ok();
}

void put_param_info_reply(Writer& w, uint64_t offset, uint64_t size) {
  w.put_u64(offset);
  w.put_u64(size);
}

bool read_param_info_reply(Reader& r, uint64_t* offset, uint64_t* size) {
  *offset = r.u64();
  *size = r.u64();
  return r.ok();
}

}  // namespace rgpu::proto::wire
