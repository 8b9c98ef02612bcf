// cuLinkComplete (wire layout in protocol/wire/link.h): the client's whole link, run here in
// one go: create a link state with the client's options (log buffers of our own, of the sizes
// the client asked for), add every input, complete, and send back the slots, the logs and the
// cubin. The driver's link state never outlives the call.
#include <cuda.h>

#include <cstring>
#include <string>
#include <vector>

#include "gen/server_handlers.gen.h"
#include "protocol/wire/link.h"
#include "server/dispatch.h"

namespace rgpu::server::handlers {
namespace {

namespace wire = proto::wire;

struct Options {
  std::vector<CUjit_option> opts;
  std::vector<void*> values;
};

// The decoded options for the driver. Log buffers point into info/error (sized by their
// *_SIZE_BYTES options); an input's options have none (the decoder refuses them).
void to_options(const std::vector<wire::JitOption>& raw, Options* o, std::string* info, std::string* error) {
  for (auto& [opt, v] : raw) {
    if (opt == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES && info) info->assign(v, '\0');
    if (opt == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES && error) error->assign(v, '\0');
    o->opts.push_back(static_cast<CUjit_option>(opt));
    o->values.push_back(reinterpret_cast<void*>(static_cast<uintptr_t>(v)));
  }
  // Point the log buffers at ours once their sizes are known (either order in the array). A
  // buffer without a size option stays empty: the driver then writes nothing to it.
  for (size_t i = 0; i < o->opts.size(); ++i) {
    if (o->opts[i] == CU_JIT_INFO_LOG_BUFFER) o->values[i] = info->empty() ? nullptr : info->data();
    if (o->opts[i] == CU_JIT_ERROR_LOG_BUFFER) o->values[i] = error->empty() ? nullptr : error->data();
  }
}

std::string c_str(const std::string& buf) { return std::string(buf.c_str()); }

}  // namespace

void cuLinkComplete(Dispatch& d) {
  wire::LinkComplete req;
  if (!wire::read_link_complete(d.args, &req)) return;
  Options link;
  std::string info, error;
  to_options(req.options, &link, &info, &error);
  // CU_JIT_WALL_TIME: the driver overwrites the slot with a float. Some programs (NVIDIA's ptxjit
  // sample) put a float* there instead; give the slot one of ours, so that either reading is safe.
  float wall = 0;
  for (size_t i = 0; i < link.opts.size(); ++i)
    if (link.opts[i] == CU_JIT_WALL_TIME) link.values[i] = &wall;
  struct Input {
    CUjitInputType type;
    std::string name;
    Options options;
    const uint8_t* data;
    size_t len;
  };
  std::vector<Input> inputs(req.inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const wire::LinkInput& from = req.inputs[i];
    Input& in = inputs[i];
    in.type = static_cast<CUjitInputType>(from.type);
    in.name = from.name;
    to_options(from.options, &in.options, nullptr, nullptr);
    in.data = from.data;
    in.len = from.len;
  }
  CUresult rc = CUDA_ERROR_NOT_SUPPORTED;
  std::vector<uint8_t> cubin;
  if (d.drv.cuLinkCreate_v2 && d.drv.cuLinkAddData_v2 && d.drv.cuLinkComplete && d.drv.cuLinkDestroy) {
    CUlinkState state = nullptr;
    rc = d.drv.cuLinkCreate_v2(static_cast<unsigned>(link.opts.size()), link.opts.data(), link.values.data(), &state);
    for (Input& in : inputs) {
      if (rc != CUDA_SUCCESS) break;
      // The driver reads PTX up to its NUL: a copy that has one.
      std::vector<uint8_t> data(in.data, in.data + in.len);
      if (in.type == CU_JIT_INPUT_PTX && (data.empty() || data.back() != 0)) data.push_back(0);
      rc = d.drv.cuLinkAddData_v2(state, in.type, data.data(), data.size(), in.name.c_str(),
                                  static_cast<unsigned>(in.options.opts.size()), in.options.opts.data(),
                                  in.options.values.data());
    }
    if (rc == CUDA_SUCCESS) {
      void* out = nullptr;
      size_t size = 0;
      rc = d.drv.cuLinkComplete(state, &out, &size);
      if (rc == CUDA_SUCCESS && (!out || !size)) rc = CUDA_ERROR_UNKNOWN;
      if (rc == CUDA_SUCCESS) cubin.assign(static_cast<uint8_t*>(out), static_cast<uint8_t*>(out) + size);
    }
    if (state) d.drv.cuLinkDestroy(state);
  }
  d.reply.put<int32_t>(rc);
  wire::LinkResult out;
  for (size_t i = 0; i < link.opts.size(); ++i) {  // our log buffers' addresses stay here
    bool buffer = link.opts[i] == CU_JIT_INFO_LOG_BUFFER || link.opts[i] == CU_JIT_ERROR_LOG_BUFFER;
    uint64_t slot = buffer ? 0 : reinterpret_cast<uintptr_t>(link.values[i]);
    if (link.values[i] == &wall) {  // not overwritten: the driver wrote through the pointer, if at all
      slot = 0;
      std::memcpy(&slot, &wall, sizeof wall);
    }
    out.slots.push_back(slot);
  }
  out.info = c_str(info);
  out.error = c_str(error);
  out.cubin = cubin.data();
  out.cubin_len = cubin.size();
  wire::put_link_result(d.reply, rc == CUDA_SUCCESS, out);
}

}  // namespace rgpu::server::handlers
