// Occupancy on the wire (layout in occupancy.h).
#include "protocol/wire/occupancy.h"

#include "protocol/messages.h"

namespace rgpu::proto::wire {

void put_potential_block_size(Writer& w, const PotentialBlockSize& v) {
  w.put_u64(v.function);
  w.put_u64(v.dynamic_smem);
  w.put<int32_t>(v.block_size_limit);
  w.put_u32(v.flags);
  w.put_u32(static_cast<uint32_t>(v.table.size()));
  for (uint64_t b : v.table) w.put_u64(b);
}

bool read_potential_block_size(Reader& r, PotentialBlockSize* out) {
  out->function = r.u64();
  out->dynamic_smem = r.u64();
  out->block_size_limit = r.i32();
  out->flags = r.u32();
  uint32_t n = r.u32();
  if (!r.ok() || n > kMaxBlockTable) return r.fail();
  out->table.resize(n);
  for (auto& b : out->table) b = r.u64();
  return r.ok();
}

void put_potential_block_size_reply(Writer& w, int32_t min_grid, int32_t block) {
  w.put<int32_t>(min_grid);
  w.put<int32_t>(block);
}

bool read_potential_block_size_reply(Reader& r, int32_t* min_grid, int32_t* block) {
  *min_grid = r.i32();
  *block = r.i32();
  return r.ok();
}

void put_cluster_count(Writer& w, int32_t clusters) { w.put<int32_t>(clusters); }

bool read_cluster_count(Reader& r, int32_t* clusters) {
  *clusters = r.i32();
  return r.ok();
}

void put_cluster_widths(Writer& w, const ClusterWidths& v) {
  w.put_u32(v.first);
  w.put_u32(v.count);
  w.put_u8(v.grid_follows ? 1 : 0);
}

bool read_cluster_widths(Reader& r, ClusterWidths* out) {
  out->first = r.u32();
  out->count = r.u32();
  out->grid_follows = r.u8() != 0;
  return r.ok();
}

void put_cluster_table(Writer& w, const std::vector<std::pair<int32_t, int32_t>>& v) {
  w.put_u32(static_cast<uint32_t>(v.size()));
  for (const auto& [rc, clusters] : v) {
    w.put<int32_t>(rc);
    w.put<int32_t>(clusters);
  }
}

bool read_cluster_table(Reader& r, std::vector<std::pair<int32_t, int32_t>>* out) {
  uint32_t n = r.u32();
  if (!r.ok() || n > kMaxClusterTable) return r.fail();
  out->resize(n);
  for (auto& [rc, clusters] : *out) {
    rc = r.i32();
    clusters = r.i32();
  }
  return r.ok();
}

}  // namespace rgpu::proto::wire
