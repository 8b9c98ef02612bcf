// The ATen kernels rgpu runs on the client: allocation and metadata (views, resize_, set_) never
// touch the server's bytes, and the copies between host and device are where data moves. The
// rest goes through the boxed fallback (aten/fallback.cpp). Registered in aten/register.cpp.
#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>
#include <ATen/ops/_copy_from_ops.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/_to_copy_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>

#include "aten/kernels.h"
#include "common/huge_pages.h"
#include "aten/remote.h"
#include "protocol/torch_wire.h"
#include "runtime/connection.h"
#include "runtime/device.h"
#include "runtime/readahead.h"

namespace rgpu::torchdev {

using namespace rgpu::torchwire;

namespace {

constexpr c10::DispatchKeySet kKeys{c10::DispatchKey::PrivateUse1};
// Host-to-device copies travel in frames of this many bytes, written from the source in place:
// the size of the driver path's (RGPU_BULK_CHUNK) and of the server's read replies, small enough
// that the channel's copy of a frame is still in cache when the socket takes it.
constexpr size_t kWriteChunk = 1u << 20;

bool is_rgpu(const at::Tensor& t) { return t.defined() && t.device().type() == kDeviceType; }

// The device a factory call names: its index, or the current device.
c10::DeviceIndex index_of(std::optional<c10::Device> d) {
  if (!d || d->type() != kDeviceType || !d->has_index()) return current_device();
  check_device_index(d->index());
  return d->index();
}

void check_layout(std::optional<c10::Layout> layout) {
  TORCH_CHECK(!layout || *layout == c10::kStrided, "rgpu supports strided (dense) tensors only, not ", *layout);
}

// Host bytes (contiguous, dst's dtype and shape) into an rgpu tensor.
void write(const at::Tensor& dst, const at::Tensor& src) {
  Connection& c = Connection::get();
  const auto* p = static_cast<const uint8_t*>(src.const_data_ptr());
  const size_t total = src.nbytes();
  size_t at = 0;
  do {
    size_t n = std::min(kWriteChunk, total - at);
    Writer w;
    put_tensor_desc(w, dst);
    w.put_u64(total);
    w.put_u64(at);
    w.put_u64(n);  // put_bytes' length; the bytes follow in place
    c.post_bulk(kTorchWrite, w, p + at, n);
    at += n;
  } while (at < total);
}

// An rgpu tensor's elements, contiguous, into a host buffer of exactly their size (waits).
void read(const at::Tensor& src, void* out, size_t nbytes) {
  Writer w;
  put_tensor_desc(w, src);
  Connection::get().call(kTorchRead, w, "read", out, nbytes);
}

}  // namespace

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  check_layout(layout);
  c10::DeviceGuard guard(rgpu::torchdev::device(index_of(device)));  // the allocator allocates on the current device
  return at::detail::empty_generic(size, allocator(), kKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory) {
  check_layout(layout);
  c10::DeviceGuard guard(rgpu::torchdev::device(index_of(device)));
  return at::detail::empty_strided_generic(size, stride, allocator(), kKeys, c10::dtype_or_default(dtype));
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) { return at::native::view(self, size); }

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

at::Tensor view_as_real(const at::Tensor& self) { return at::native::view_as_real(self); }
at::Tensor view_as_complex(const at::Tensor& self) { return at::native::view_as_complex(self); }

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size, std::optional<at::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  if (!self.sizes().equals(size)) impl->set_sizes_contiguous(size);
  if (memory_format && *memory_format != at::MemoryFormat::Preserve) impl->empty_tensor_restride(*memory_format);
  restride(self, self.sizes(), self.strides());
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t storage_offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == kDeviceType, "rgpu: set_() needs an rgpu storage, got one on ",
              source.device());
  TORCH_CHECK(storage_offset >= 0, "rgpu: set_() with a negative storage offset");
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(storage_offset);
  std::vector<int64_t> strides(stride.begin(), stride.end());
  if (stride.empty()) {
    auto cs = c10::contiguous_strides(size);
    strides.assign(cs.begin(), cs.end());
  }
  restride(self, size, strides);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.element_size());
  return set_storage(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_storage(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  return set_storage(self, c10::Storage(c10::Storage::use_byte_size_t(), 0, allocator(), true), 0, {0}, {});
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (self.is_same(dst) || dst.numel() == 0) return dst;
  // The wire describes a view without its conjugate and negative bits (put_tensor_desc): the
  // raw values travel and the bits are applied where they land.
  if (is_rgpu(self) && is_rgpu(dst)) {
    post_op("aten::copy_", "", {dst, self, false});
    if (self.is_conj() && dst.is_complex()) post_op("aten::conj_physical_", "", {dst});
    if (self.is_neg()) post_op("aten::neg_", "", {dst});
  } else if (is_rgpu(dst)) {
    TORCH_CHECK(self.is_cpu(), "rgpu: cannot copy from ", self.device(), " to rgpu; go through the cpu");
    at::Tensor src = self.to(dst.scalar_type()).resolve_conj().resolve_neg().expand(dst.sizes()).contiguous();
    write(dst, src);
  } else {
    TORCH_CHECK(dst.is_cpu(), "rgpu: cannot copy from rgpu to ", dst.device(), "; go through the cpu");
    // From the read-ahead when the storage's bytes were fetched with others (runtime/readahead.h);
    // else straight into dst when it takes the elements as they come, else through a buffer.
    at::Tensor tmp = readahead_view(self);
    if (!tmp.defined()) {
      const bool in_place = dst.is_contiguous() && dst.scalar_type() == self.scalar_type() &&
                            dst.sizes().equals(self.sizes()) && !self.is_conj() && !self.is_neg() &&
                            !dst.is_conj() && !dst.is_neg();
      if (in_place) {
        advise_huge_pages(dst.data_ptr(), dst.nbytes());  // a fresh .cpu() result: cheaper first touch
        read(self, dst.data_ptr(), dst.nbytes());
        return dst;
      }
      tmp = at::empty(self.sizes(), self.options().device(c10::kCPU));
      read(self, tmp.data_ptr(), tmp.nbytes());
    }
    if (self.is_conj()) tmp = tmp.conj();
    if (self.is_neg()) tmp = tmp._neg_view();
    dst.copy_(tmp);
  }
  return dst;
}

at::Tensor to_copy(const at::Tensor& self, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                   std::optional<at::Device> device, std::optional<bool> pin_memory, bool non_blocking,
                   std::optional<at::MemoryFormat> memory_format) {
  // `.cpu()` of a contiguous tensor as it is: its result's memory comes from the host cache
  // (runtime/host_cache.cpp), so a second `.cpu()` of that size lands in pages already touched.
  const bool as_is = device && device->is_cpu() && (!dtype || *dtype == self.scalar_type()) &&
                     (!layout || *layout == at::kStrided) && !pin_memory.value_or(false) &&
                     (!memory_format || *memory_format == at::MemoryFormat::Preserve ||
                      *memory_format == at::MemoryFormat::Contiguous) &&
                     is_rgpu(self) && self.is_contiguous() && !self.is_conj() && !self.is_neg();
  if (!as_is || self.nbytes() < kHostCacheMin) {
    return at::native::_to_copy(self, dtype, layout, device, pin_memory, non_blocking, memory_format);
  }
  c10::Storage storage(c10::Storage::use_byte_size_t(), self.nbytes(), host_cache_allocator(), /*resizable=*/true);
  at::Tensor out = at::empty({0}, self.options().device(c10::kCPU));
  out.set_(std::move(storage), 0, self.sizes(), self.strides());
  return copy_from(self, out, non_blocking);
}

at::Tensor copy_from_with_bits(c10::DispatchKeySet ks, const at::Tensor& self, const at::Tensor& dst,
                               bool non_blocking) {
  if (is_rgpu(self)) return copy_from(self, dst, non_blocking);
  // Another device's source: materialise its bits there, as the Conjugate fallback would.
  at::Tensor src = self.resolve_conj().resolve_neg();
  return at::_ops::_copy_from::redispatch(ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::Conjugate),
                                          src, dst, non_blocking);
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (!dst.sizes().equals(self.sizes())) dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(), " elements cannot be converted to Scalar");
  at::Tensor tmp = at::empty(self.sizes(), self.options().device(c10::kCPU));
  read(self, tmp.data_ptr(), tmp.nbytes());
  return tmp.item();
}

void record_stream(at::Tensor&, c10::Stream) {}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  // Plain dense tensors of rgpu and of the backends torch itself lets swap metadata (the list in
  // c10::TensorImpl::has_compatible_shallow_copy_type): both are a c10::TensorImpl with a
  // storage, so set_data's shallow_copy_from carries everything over. Sparse, quantized and
  // wrapper tensors keep torch's answer.
  auto plain_dense = [](const at::Tensor& t) {
    constexpr auto backends = c10::DispatchKeySet(
        {c10::BackendComponent::CPUBit, c10::BackendComponent::CUDABit, c10::BackendComponent::MPSBit,
         c10::BackendComponent::HIPBit, c10::BackendComponent::XPUBit, c10::BackendComponent::HPUBit,
         c10::BackendComponent::MTIABit, c10::BackendComponent::PrivateUse1Bit});
    c10::DispatchKeySet ks = t.key_set();
    return ks.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) && ks.has_any(backends);
  };
  auto* impl = self.unsafeGetTensorImpl();
  return impl->has_compatible_shallow_copy_type(from.key_set()) || (plain_dense(self) && plain_dense(from));
}

}  // namespace rgpu::torchdev
