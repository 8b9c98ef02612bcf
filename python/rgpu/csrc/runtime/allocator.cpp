// The rgpu allocator (runtime/device.h): storages are ids the client mints; the server allocates
// lazily when it first sees the id used, so allocation never waits for the network. Allocations
// and frees travel in the connection's next frame (runtime/connection.h), not on their own.
#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>

#include "protocol/torch_wire.h"
#include "runtime/connection.h"
#include "runtime/device.h"

namespace rgpu::torchdev {

using namespace rgpu::torchwire;

namespace {

struct RemoteStorage {
  uint64_t id;
};

void free_remote(void* ctx) {
  auto* rs = static_cast<RemoteStorage*>(ctx);
  if (Connection* c = Connection::existing()) c->release(rs->id);
  delete rs;
}

c10::DataPtr data_ptr_for(uint64_t id, c10::DeviceIndex index) {
  // A fake address, unique per storage: 16 MiB apart, never dereferenced.
  void* fake = reinterpret_cast<void*>(static_cast<uintptr_t>(id) << 24);
  return c10::DataPtr(fake, new RemoteStorage{id}, &free_remote, device(index));
}

class RgpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DeviceIndex index = current_device();
    return data_ptr_for(Connection::get().allocate(nbytes, static_cast<uint8_t>(index)), index);
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void*, const void*, std::size_t) const override {
    TORCH_CHECK(false, "rgpu: device bytes cannot be copied on the client; copy tensors with .copy_() or .to()");
  }
};

RgpuAllocator g_allocator;

}  // namespace

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

c10::Allocator* allocator() { return &g_allocator; }

c10::Storage storage_for_id(uint64_t id, size_t nbytes, c10::DeviceIndex device) {
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                                           data_ptr_for(id, device), &g_allocator, /*resizable=*/true));
}

uint64_t storage_id(const c10::Storage& s) {
  const c10::DataPtr& dp = s.data_ptr();
  TORCH_CHECK(dp.get_deleter() == &free_remote, "rgpu: a tensor on device ", s.device(),
              " has no rgpu storage (was it made by another backend?)");
  return static_cast<RemoteStorage*>(dp.get_context())->id;
}

void grow_storage(const c10::Storage& s, size_t nbytes) {
  if (nbytes <= s.nbytes()) return;
  Writer w;
  w.put_u64(storage_id(s));
  w.put_u64(nbytes);
  Connection::get().post(kTorchResize, w);
  s.unsafeGetStorageImpl()->set_nbytes(nbytes);
}

void restride(const at::Tensor& t, c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  auto* impl = t.unsafeGetTensorImpl();
  if (!t.sizes().equals(sizes) || !t.strides().equals(strides)) impl->set_sizes_and_strides(sizes, strides);
  if (t.numel() == 0) return;
  int64_t last = t.storage_offset();
  for (size_t k = 0; k < sizes.size(); ++k) last += (sizes[k] - 1) * strides[k];
  grow_storage(t.storage(), static_cast<size_t>(last + 1) * t.element_size());
}

void synchronize() {
  Connection::get().call(kTorchSync, Writer(), "synchronize");
}

}  // namespace rgpu::torchdev
