// Export-table slots on the wire (layout in dark_api.h).
#include "protocol/wire/dark_api.h"

#include "protocol/messages.h"
#include "protocol/wire/module.h"

namespace rgpu::proto::wire {

void put_tools_context_ask(Writer& w, const ToolsContextAsk& v) {
  w.put_u64(v.context);
  w.put_u64(v.stream);
}

bool read_tools_context_ask(Reader& r, ToolsContextAsk* out) {
  out->context = r.u64();
  out->stream = r.left() >= sizeof(uint64_t) ? r.u64() : 0;
  return r.ok();
}

void put_tools_context_value(Writer& w, const ToolsContextValue& v) {
  w.put<int32_t>(v.query_result);
  w.put_u64(v.value);
}

bool read_tools_context_value(Reader& r, ToolsContextValue* out) {
  out->query_result = r.i32();
  out->value = r.u64();
  return r.ok();
}

void put_module_functions_ask(Writer& w, const ModuleFunctionsAsk& v) {
  w.put_u64(v.context);
  w.put_u64(v.module);
}

bool read_module_functions_ask(Reader& r, ModuleFunctionsAsk* out) {
  out->context = r.u64();
  out->module = r.u64();
  return r.ok();
}

void put_function_names(Writer& w, const std::vector<std::string>& names) {
  w.put_u32(static_cast<uint32_t>(names.size()));
  for (const std::string& name : names) w.put_str(name);
}

bool read_function_names(Reader& r, std::vector<std::string>* names) {
  uint32_t n = r.u32();
  if (!r.ok() || n > r.left() / sizeof(uint32_t)) return r.fail();  // each name has its length
  names->resize(n);
  for (std::string& name : *names) {
    name = r.str(kMaxSymbolName);
    if (!r.ok()) return false;
  }
  return true;
}

void put_context_ask(Writer& w, uint64_t context) { w.put_u64(context); }

bool read_context_ask(Reader& r, uint64_t* context) {
  *context = r.u64();
  return r.ok();
}

void put_cluster_topology(Writer& w, const void* data, uint32_t n) {
  w.put_u32(n);
  if (n) w.append(data, n);
}

bool read_cluster_topology(Reader& r, std::vector<uint8_t>* out) {
  uint32_t n = r.u32();
  if (!r.ok() || n > kMaxClusterTopology) return r.fail();
  out->resize(n);
  return r.take(out->data(), n);
}

void put_export_table_ask(Writer& w, const CUuuid& id) { w.append(&id, sizeof id); }

bool read_export_table_ask(Reader& r, CUuuid* id) { return r.take(id, sizeof *id); }

void put_export_table_word(Writer& w, uint64_t first) { w.put_u64(first); }

bool read_export_table_word(Reader& r, uint64_t* first) {
  *first = r.u64();
  return r.ok();
}

}  // namespace rgpu::proto::wire
