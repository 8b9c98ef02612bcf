// The ATen kernels rgpu runs on the client (aten/kernels.cpp); aten/register.cpp registers them.
#pragma once

#include <ATen/ATen.h>

namespace rgpu::torchdev {

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format);
at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory);
at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset);
at::Tensor view(const at::Tensor& self, c10::IntArrayRef size);
at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride);
at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step);
at::Tensor view_as_real(const at::Tensor& self);
at::Tensor view_as_complex(const at::Tensor& self);
const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size, std::optional<at::MemoryFormat> memory_format);
at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t storage_offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride);
at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source);
at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source);
at::Tensor& set_empty(at::Tensor& self);
// _copy_from(self=src, dst): cpu->rgpu (one-way), rgpu->rgpu (one-way), rgpu->cpu (waits).
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
// _copy_from for the Conjugate and Negative keys: their fallback would resolve an rgpu source by
// cloning it, which copies through _copy_from again, forever; rgpu applies the bits itself.
at::Tensor copy_from_with_bits(c10::DispatchKeySet ks, const at::Tensor& self, const at::Tensor& dst,
                               bool non_blocking);
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst);
// _to_copy: `.cpu()` of a contiguous rgpu tensor as it is gets its result's memory from the
// host cache (runtime/host_cache.cpp); everything else as torch's own _to_copy.
at::Tensor to_copy(const at::Tensor& self, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                   std::optional<at::Device> device, std::optional<bool> pin_memory, bool non_blocking,
                   std::optional<at::MemoryFormat> memory_format);
// .item(): waits for the value.
c10::Scalar local_scalar_dense(const at::Tensor& self);
void record_stream(at::Tensor& self, c10::Stream s);
// Whether `from`'s metadata may replace `self`'s in place (Tensor.data = from). torch answers it
// from a list of its own dense backends, which PrivateUse1 is not on, so without this kernel
// nn.Module._apply makes a new Parameter per module at .to("rgpu") and unties shared weights.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from);

}  // namespace rgpu::torchdev
