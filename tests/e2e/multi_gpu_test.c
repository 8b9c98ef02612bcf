/* Several GPUs through one program (tests/e2e/test_multi_gpu.py): the device list, peer access,
 * copies between devices (cuMemcpyPeer, cuMemcpyDtoD, cuMemcpy and their async forms, byte-exact
 * at odd sizes) and VMM memory of one device made accessible to another. Plain C against cuda.h,
 * so it runs on the real driver too.
 *
 * Usage: multi_gpu_test [SIZE...]. Prints what it found, one fact a line, for the test to compare
 * with what the servers present ("device 0 uuid=... bus=...", "peer 0 1 = 1",
 * "enable 0 1 = CUDA_SUCCESS"), checks what must hold whatever the devices, and ends with
 * "MULTI GPU TEST PASSED" (exit 0) or FAIL lines (exit 1). Copies go between the first and the
 * last device, both ways, once per SIZE (default 1 MiB + 3).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static void fill(uint8_t* p, size_t n, unsigned seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    p[i] = (uint8_t)(x >> 24);
  }
}

/* Copies n bytes from device a to device b and back by each copy call, checking the bytes. */
static void copies(CUcontext ca, CUcontext cb, size_t n, unsigned seed) {
  uint8_t* src = malloc(n);
  uint8_t* got = malloc(n);
  fill(src, n, seed);
  CUdeviceptr da = 0, db = 0, db2 = 0;
  CU(cuCtxSetCurrent(ca));
  CU(cuMemAlloc(&da, n));
  CU(cuMemcpyHtoD(da, src, n));
  CU(cuCtxSetCurrent(cb));
  CU(cuMemAlloc(&db, n));
  CU(cuMemAlloc(&db2, n));
  CUstream sb;
  CU(cuStreamCreate(&sb, CU_STREAM_NON_BLOCKING));

  /* cuMemcpyPeer a -> b, from b's context. */
  CU(cuMemsetD8(db, 0, n));
  CU(cuMemcpyPeer(db, cb, da, ca, n));
  memset(got, 0, n);
  CU(cuMemcpyDtoH(got, db, n));
  CHECK(memcmp(got, src, n) == 0, "cuMemcpyPeer of %zu bytes: bytes differ", n);

  /* cuMemcpyPeerAsync a -> b on b's stream. */
  CU(cuMemsetD8(db2, 0, n));
  CU(cuMemcpyPeerAsync(db2, cb, da, ca, n, sb));
  CU(cuStreamSynchronize(sb));
  memset(got, 0, n);
  CU(cuMemcpyDtoH(got, db2, n));
  CHECK(memcmp(got, src, n) == 0, "cuMemcpyPeerAsync of %zu bytes: bytes differ", n);

  /* cuMemcpyDtoD b -> a (unified addresses), after a is cleared, from a's context. */
  CU(cuCtxSetCurrent(ca));
  CU(cuMemsetD8(da, 0, n));
  CU(cuMemcpyDtoD(da, db, n));
  memset(got, 0, n);
  CU(cuMemcpyDtoH(got, da, n));
  CHECK(memcmp(got, src, n) == 0, "cuMemcpyDtoD of %zu bytes: bytes differ", n);

  /* cuMemcpyDtoDAsync a -> b on b's stream, then cuMemcpy b -> a. */
  CU(cuCtxSetCurrent(cb));
  CU(cuMemsetD8(db, 0, n));
  CU(cuMemcpyDtoDAsync(db, da, n, sb));
  CU(cuStreamSynchronize(sb));
  CU(cuCtxSetCurrent(ca));
  CU(cuMemsetD8(da, 0, n));
  CU(cuMemcpy(da, db, n));
  memset(got, 0, n);
  CU(cuMemcpyDtoH(got, da, n));
  CHECK(memcmp(got, src, n) == 0, "cuMemcpyDtoDAsync then cuMemcpy of %zu bytes: bytes differ", n);

  printf("copies %zu ok\n", n);
  CU(cuMemFree(da));
  CU(cuCtxSetCurrent(cb));
  CU(cuStreamDestroy(sb));
  CU(cuMemFree(db));
  CU(cuMemFree(db2));
  free(src);
  free(got);
}

/* Physical memory on device b, mapped and made accessible to a and b, written through a's
 * context and read through b's. */
static void vmm_across(CUdevice a, CUdevice b, CUcontext ca, CUcontext cb) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = b;
  size_t gran = 0;
  CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CU(cuCtxSetCurrent(cb));
  CUmemGenericAllocationHandle h = 0;
  CU(cuMemCreate(&h, gran, &prop, 0));
  CUdeviceptr va = 0;
  CU(cuMemAddressReserve(&va, gran, 0, 0, 0));
  CU(cuMemMap(va, gran, 0, h, 0));
  CUmemAccessDesc desc[2];
  memset(desc, 0, sizeof desc);
  desc[0].location.type = desc[1].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc[0].location.id = a;
  desc[1].location.id = b;
  desc[0].flags = desc[1].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(va, gran, desc, 2));
  unsigned long long flags = 0;
  CU(cuMemGetAccess(&flags, &desc[0].location, va));
  CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "cuMemGetAccess for device %d: %llu", a, flags);
  CU(cuCtxSetCurrent(ca));
  CU(cuMemsetD32(va, 0xabcd1234u, gran / 4));
  CU(cuCtxSetCurrent(cb));
  uint32_t word = 0;
  CU(cuMemcpyDtoH(&word, va + gran - 4, 4));
  CHECK(word == 0xabcd1234u, "VMM memory of device %d written from device %d: %#x", b, a, word);
  CU(cuMemUnmap(va, gran));
  CU(cuMemAddressFree(va, gran));
  CU(cuMemRelease(h));
  printf("vmm %d %d ok\n", a, b);
}

int main(int argc, char** argv) {
  CU(cuInit(0));
  int count = 0;
  CU(cuDeviceGetCount(&count));
  printf("count %d\n", count);
  if (count < 2) {
    fprintf(stderr, "FAIL: %d devices; this test needs two or more\n", count);
    return 1;
  }
  for (int d = 0; d < count; ++d) {
    CUuuid u;
    CU(cuDeviceGetUuid(&u, d));
    char bus[32] = "";
    CU(cuDeviceGetPCIBusId(bus, sizeof bus, d));
    char name[128] = "";
    CU(cuDeviceGetName(name, sizeof name, d));
    printf("device %d uuid-last=%02x bus=%s name=%s\n", d, (unsigned char)u.bytes[15], bus, name);
  }
  for (int a = 0; a < count; ++a)
    for (int b = 0; b < count; ++b) {
      int can = -1;
      CU(cuDeviceCanAccessPeer(&can, a, b));
      printf("peer %d %d = %d\n", a, b, can);
      if (a == b) CHECK(can == 0, "a device is not its own peer (%d)", a);
      int access = -1;
      CUresult rc = cuDeviceGetP2PAttribute(&access, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, a, b);
      if (a == b) CHECK(rc == CUDA_ERROR_INVALID_DEVICE, "P2P attribute of %d with itself: %s", a, err_name(rc));
      if (a != b) {
        CHECK(rc == CUDA_SUCCESS && access == can, "P2P access %d %d: %s, %d (canAccessPeer %d)", a, b,
              err_name(rc), access, can);
      }
    }

  const int last = count - 1;
  CUcontext c0 = NULL, cl = NULL;
  CU(cuDevicePrimaryCtxRetain(&c0, 0));
  CU(cuDevicePrimaryCtxRetain(&cl, last));
  CHECK(c0 && cl && c0 != cl, "two devices' primary contexts are two contexts (%p, %p)", (void*)c0, (void*)cl);
  CU(cuCtxSetCurrent(cl));
  CUdevice dev = -1;
  CU(cuCtxGetDevice(&dev));
  CHECK(dev == last, "cuCtxGetDevice in device %d's primary context: %d", last, dev);

  /* Peer access from device 0's context to the last device's, as the driver answers it. */
  CU(cuCtxSetCurrent(c0));
  CUresult en = cuCtxEnablePeerAccess(cl, 0);
  printf("enable 0 %d = %s\n", last, err_name(en));
  if (en == CUDA_SUCCESS) {
    CUresult again = cuCtxEnablePeerAccess(cl, 0);
    CHECK(again == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "second enable: %s", err_name(again));
    CU(cuCtxDisablePeerAccess(cl));
    CUresult off = cuCtxDisablePeerAccess(cl);
    CHECK(off == CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "second disable: %s", err_name(off));
    CU(cuCtxEnablePeerAccess(cl, 0));
  }
  CUresult self = cuCtxEnablePeerAccess(c0, 0);
  CHECK(self == CUDA_ERROR_INVALID_DEVICE, "peer access to its own device: %s", err_name(self));

  for (int i = 1; i < argc; ++i) copies(c0, cl, (size_t)strtoull(argv[i], NULL, 0), (unsigned)i);
  if (argc == 1) copies(c0, cl, (1u << 20) + 3, 1);

  /* Where a pointer lives. */
  CU(cuCtxSetCurrent(cl));
  CUdeviceptr p = 0;
  CU(cuMemAlloc(&p, 4096));
  int ordinal = -1;
  CU(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
  CHECK(ordinal == last, "an allocation in device %d's context is on device %d", last, ordinal);
  CU(cuMemFree(p));

  int can = 0;
  CU(cuDeviceCanAccessPeer(&can, 0, last));
  if (can) vmm_across(0, last, c0, cl);

  CU(cuDevicePrimaryCtxRelease(0));
  CU(cuDevicePrimaryCtxRelease(last));
  if (g_failures) {
    fprintf(stderr, "%d of %d checks failed\n", g_failures, g_checks);
    return 1;
  }
  printf("MULTI GPU TEST PASSED (%d checks)\n", g_checks);
  return 0;
}
