// Read-ahead of device-to-host copies: saving a checkpoint reads every storage of a state_dict
// one by one (torch.save calls storage.cpu() per storage; `{k: v.cpu() ...}` per tensor), and one
// round trip each made a 4-layer model's save wait 84 times. Storages that are about to be read
// are announced (python/rgpu/__init__.py: torch.save's location tag for rgpu storages, and
// Module.state_dict); the first read of an announced storage fetches it with the announced
// storages after it in one kTorchReadMany, and the reads that follow are served from those host
// copies.
//
// Contract:
// - A host copy is served only while Connection::generation() is the one it was fetched at: no
//   frame that could change a storage's bytes has been sent since, so the copy is exact. Any
//   such frame drops the copies and the announcements.
// - Announcements hold no storage alive; a storage freed since its announcement is skipped.
// - A copy is dropped once a read takes the whole storage; a batch holds at most kBatchBytes
//   (storages larger than that are read on their own, straight into their destination).
// Thread-safe.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace rgpu::torchdev {

// Storages (those of the tensors) likely to be read soon, in the order they will be read.
void announce_reads(const std::vector<at::Tensor>& tensors);
void announce_storages(const std::vector<c10::Storage>& storages);

// src's elements on the cpu (a view of a host copy, src's sizes, strides and offset) when src's
// storage was announced or fetched; fetches its batch first when it was only announced (one
// wait). Undefined when src's storage is neither: the caller reads it alone.
at::Tensor readahead_view(const at::Tensor& src);

}  // namespace rgpu::torchdev
