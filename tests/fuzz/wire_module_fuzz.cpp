// Fuzz target for protocol/wire/module.h and link.h: the server decodes every image load, load by
// hash, symbol lookup and link the client sends, the client decodes the names and link results
// the server answers, so any bytes
// must decode or be refused without reading past the end or taking a name over the limit. The
// first byte picks the message. What decodes must re-encode to bytes that decode and re-encode to
// the same bytes again.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/wire.h"
#include "protocol/wire/link.h"
#include "protocol/wire/module.h"
#include "tests/fuzz/wire_fuzz.h"

namespace {

using namespace rgpu::proto::wire;
using rgpu::Reader;
using rgpu::Writer;

bool decode_encode(uint8_t k, Reader& r, Writer* out) {
  switch (k & 7) {
    case 0: {
      ImageLoad m;
      if (!read_image_load(r, &m)) return false;
      put_image_load_head(*out, m.id, m.n);
      out->append(m.image, m.n);
      return true;
    }
    case 1: {
      ModuleByHash m;
      if (!read_module_by_hash(r, &m)) return false;
      put_module_by_hash(*out, m);
      return true;
    }
    case 2: {
      SymbolLookup m;
      if (!read_symbol_lookup(r, &m)) return false;
      if (m.name.size() > kMaxSymbolName) abort();
      // A name with a NUL inside cannot be a C string: re-encoded, it is cut at the NUL.
      if (m.name.find('\0') != std::string::npos) return false;
      put_symbol_lookup(*out, m.id, m.parent, m.name.c_str());
      return true;
    }
    case 4: {
      LinkComplete m;
      if (!read_link_complete(r, &m)) return false;
      std::vector<CUjit_option> opts;
      std::vector<uint64_t> values;
      for (const auto& [o, v] : m.options) opts.push_back(static_cast<CUjit_option>(o)), values.push_back(v);
      put_link_complete_head(*out, opts.size(), opts.data(), values.data(), static_cast<uint32_t>(m.inputs.size()));
      for (const LinkInput& in : m.inputs) {
        if (in.name.find('\0') != std::string::npos) return false;
        std::vector<CUjit_option> io;
        std::vector<uint64_t> iv;
        for (const auto& [o, v] : in.options) io.push_back(static_cast<CUjit_option>(o)), iv.push_back(v);
        put_link_input(*out, in.type, in.name, io.size(), io.data(), iv.data(), in.data, in.len);
      }
      return true;
    }
    case 5: {
      const bool with_cubin = k & 0x80;
      LinkResult m;
      if (!read_link_result(r, with_cubin, &m)) return false;
      put_link_result(*out, with_cubin, m);
      return true;
    }
    case 6: {
      uint64_t id;
      if (!read_id(r, &id)) return false;
      put_id(*out, id);
      return true;
    }
    default: {
      std::string name;
      if (!read_symbol_name(r, &name)) return false;
      if (name.find('\0') != std::string::npos) return false;
      put_symbol_name(*out, name.c_str());
      return true;
    }
  }
}

}  // namespace

RGPU_WIRE_FUZZ_TARGET(decode_encode)

void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  const rgpu::fuzz::Seeds seed(out);
  Writer load;
  put_image_load_head(load, 1, 8);
  load.append("\x7f" "ELFabcd", 8);
  seed(0, load);
  Writer hash;
  put_module_by_hash(hash, ModuleByHash{2, 300, {}});
  seed(1, hash);
  Writer lookup;
  put_symbol_lookup(lookup, 3, 1, "_Z6kernelPf");
  seed(2, lookup);
  Writer name;
  put_symbol_name(name, "kernel");
  seed(3, name);
  Writer link;
  CUjit_option o = CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES;
  uint64_t v = 1024;
  put_link_complete_head(link, 1, &o, &v, 1);
  put_link_input(link, CU_JIT_INPUT_PTX, "a.ptx", 0, nullptr, nullptr, ".version 8.0", 13);
  seed(4, link);
  Writer result;
  put_link_result(result, true, LinkResult{{1024}, "info", "", reinterpret_cast<const uint8_t*>("CUBIN"), 5});
  seed(0x85, result);
  Writer id;
  put_id(id, 7);
  seed(6, id);
}
