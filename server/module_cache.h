// The server's persistent cache of module images (docs/design.md §3: "Module images are
// content-addressed"), shared by every session on this machine. Each image is a file in the cache
// directory named by the lowercase hex SHA-256 of its bytes, written atomically (a temporary file
// renamed into place), so concurrent sessions never see a partial image. A client asks for an
// image by hash (protocol/messages.h kOpModuleByHash) before sending its bytes.
//
// Tenants (protocol/handshake.h): each tenant's images are a directory of their own (the "" tenant's
// the cache directory itself, tenant NAME's <dir>/tenant-NAME), so a session lists and loads by
// hash only its own tenant's images: what another tenant ran is neither shown nor loadable.
//
// Robustness: an image read back is checked against its name's hash (a damaged or edited file is
// ignored and removed). Only the image is stored (its own length, common/cuda_image.h: bytes sent
// past its end are not), and the total size of all tenants' images is capped: a store past the cap
// first removes the least recently used images (last load or store, kept as the file's access
// time). The total is kept in memory shared by the server's processes, set right by each eviction's
// scan; concurrent stores may pass the cap by their sizes until the next eviction. Every failure
// here only costs a resend: the cache is never required.
//
// Verified images: clients load the images the index lists without waiting for an answer
// (client/modules.cpp), so a listed image must load. The server gives each image it wrote or
// checked a fixed modification time (2000-01-01 00:00:00.123456789); index() lists those at the
// cost of a stat, and checks the hash of any other file first (one edited or replaced since).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/crypto.h"

namespace rgpu::server::module_cache {

// The default directory: $XDG_CACHE_HOME/rgpu, else ~/.cache/rgpu/modules ("" when neither is known).
std::string default_dir();
// Turns the cache on in dir (created if missing), holding at most max_bytes. Called once, before
// sessions start. Returns false (cache stays off) with *err when the directory cannot be made.
bool configure(const std::string& dir, uint64_t max_bytes, std::string* err);
bool enabled();
// The tenant whose images this process stores, lists and loads (its directory is made when
// missing). Called in the session's process once the handshake knows the tenant.
void set_tenant(const std::string& tenant);
// Bytes held by all tenants' images, as counted in memory.
uint64_t total_bytes();
// The image whose SHA-256 is `hash`, into *out; false when not cached (or unreadable, or damaged).
bool load(const crypto::Digest& hash, std::vector<uint8_t>* out);
// Stores the image at data (its own length, at most `received` bytes) that the driver accepted. Best
// effort: does nothing when off, already cached, not measurable or larger than the whole cache.
void store(const void* data, size_t received);
// The hashes of the cached images (at most `max`), for the session's snapshot.
std::vector<crypto::Digest> index(size_t max);
// Lowercase hex of a digest (the file name).
std::string hex(const crypto::Digest& d);

}  // namespace rgpu::server::module_cache
