// Loading code on the wire (layout in module.h).
#include "protocol/wire/module.h"

namespace rgpu::proto::wire {

void put_image_load_head(Writer& w, uint64_t id, uint64_t n) {
  w.put_u64(id);
  w.put_u64(n);
}

bool read_image_load(Reader& r, ImageLoad* out) {
  out->id = r.u64();
  out->image = r.bytes(&out->n);
  return r.ok();
}

void put_module_by_hash(Writer& w, const ModuleByHash& v) {
  w.put_u64(v.id);
  w.put_u16(v.load_op);
  w.append(v.hash.data(), v.hash.size());
}

bool read_module_by_hash(Reader& r, ModuleByHash* out) {
  out->id = r.u64();
  out->load_op = r.u16();
  r.take(out->hash.data(), out->hash.size());
  return r.ok();
}

void put_symbol_lookup(Writer& w, uint64_t id, uint64_t parent, const char* name) {
  w.put_u64(id);
  w.put_u64(parent);
  w.put_str(name);
}

bool read_symbol_lookup(Reader& r, SymbolLookup* out) {
  out->id = r.u64();
  out->parent = r.u64();
  out->name = r.str(kMaxSymbolName);
  return r.ok();
}

void put_id(Writer& w, uint64_t id) { w.put_u64(id); }

bool read_id(Reader& r, uint64_t* id) {
  *id = r.u64();
  return r.ok();
}

void put_symbol_name(Writer& w, const char* name) { w.put_str(name); }

bool read_symbol_name(Reader& r, std::string* name) {
  *name = r.str(kMaxSymbolName);
  return r.ok();
}

}  // namespace rgpu::proto::wire
