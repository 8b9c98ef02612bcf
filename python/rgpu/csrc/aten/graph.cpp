// Compiled graphs on the client (python/rgpu/compile.py builds them; protocol/torch_wire.h
// kTorchGraph, kTorchGraphRun): rgpu::graph_define posts a serialized graph once, rgpu::graph_run
// posts one run of it and returns its results, whose storage ids are minted here and whose
// layouts the caller gives (from the FX graph's metadata): no round trip, no meta run.
#include <torch/library.h>

#include "aten/remote.h"
#include "protocol/torch_wire.h"
#include "runtime/connection.h"
#include "runtime/device.h"

namespace rgpu::torchdev {
namespace {

using namespace rgpu::torchwire;

void graph_define(const at::Tensor& program) {
  TORCH_CHECK(program.device().is_cpu() && program.scalar_type() == at::kByte && program.dim() == 1 &&
                  program.is_contiguous(),
              "rgpu: graph_define takes the serialized graph as a contiguous 1-d uint8 cpu tensor");
  Writer w;
  w.append(program.const_data_ptr(), static_cast<size_t>(program.numel()));
  Connection::get().post(kTorchGraph, w);
}

// out_meta: per graph result, dtype (-1: no tensor is sent back for it), ndim, sizes, strides,
// storage offset. Returns the sent-back results, in order.
std::vector<at::Tensor> graph_run(int64_t id, int64_t device_index, const std::vector<at::Tensor>& inputs,
                                  c10::IntArrayRef out_meta) {
  Connection& c = Connection::get();
  Writer w;
  w.put_u64(static_cast<uint64_t>(id));
  w.put_u8(static_cast<uint8_t>(device_index));
  w.put_u32(static_cast<uint32_t>(inputs.size()));
  for (const at::Tensor& t : inputs) {
    TORCH_CHECK(t.device().type() == kDeviceType, "rgpu: a compiled graph's input is on ", t.device(),
                ", not on rgpu");
    w.put_u8(kRemoteTensor);
    put_tensor_desc(w, t);
  }
  std::vector<at::Tensor> outs;
  Writer specs;
  uint32_t nout = 0;
  size_t k = 0;
  auto next = [&]() {
    TORCH_CHECK(k < out_meta.size(), "rgpu: graph_run: out_meta is truncated");
    return out_meta[k++];
  };
  while (k < out_meta.size()) {
    ++nout;
    int64_t dtype = next();
    if (dtype < 0) {
      specs.put_u8(kOutIgnore);
      continue;
    }
    int64_t nd = next();
    TORCH_CHECK(nd >= 0 && nd <= static_cast<int64_t>(kMaxDims), "rgpu: graph_run: bad rank");
    std::vector<int64_t> sizes(nd), strides(nd);
    for (auto& s : sizes) s = next();
    for (auto& s : strides) s = next();
    int64_t offset = next();
    auto st = static_cast<c10::ScalarType>(dtype);
    int64_t numel = 1, last = offset;
    for (int64_t d = 0; d < nd; ++d) {
      numel *= sizes[d];
      if (sizes[d] > 0) last += (sizes[d] - 1) * strides[d];
    }
    uint64_t nbytes = numel == 0 ? 0 : static_cast<uint64_t>(last + 1) * c10::elementSize(st);
    uint64_t sid = c.mint();
    specs.put_u8(kOutTensor);
    specs.put_u64(sid);
    specs.put_u64(nbytes);
    put_shape(specs, static_cast<int8_t>(dtype), sizes.data(), strides.data(), sizes.size(), offset);
    auto impl = c10::make_intrusive<c10::TensorImpl>(storage_for_id(sid, nbytes, static_cast<c10::DeviceIndex>(device_index)),
                                                     c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                     caffe2::TypeMeta::fromScalarType(st));
    impl->set_sizes_and_strides(sizes, strides, offset);
    outs.emplace_back(std::move(impl));
  }
  w.put_u32(nout);
  w.append(specs.buf().data(), specs.size());
  c.post(kTorchGraphRun, w);
  return outs;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(rgpu, m) {
  m.def("graph_define(Tensor program) -> ()", &graph_define);
  m.def("graph_run(int id, int device, Tensor[] inputs, int[] out_meta) -> Tensor[]", &graph_run);
}

}  // namespace rgpu::torchdev
