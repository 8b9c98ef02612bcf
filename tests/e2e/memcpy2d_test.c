/* Pitched 2D and 3D copies through the driver API: host gather and scatter with pitches wider
 * than the copy, offsets on every side, device to device, async, unified addressing, and copies
 * larger than one bulk chunk (so rgpu cuts them into boxes). One body for the shim and for the
 * real driver: only driver-documented behaviour is checked, byte for byte, and bytes outside
 * each destination box must stay as they were. Usage: memcpy2d_test */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static uint8_t pattern(size_t i) { return (uint8_t)(i * 2654435761u >> 13); }

static uint8_t* filled(size_t n, int seed) {
  uint8_t* p = malloc(n);
  for (size_t i = 0; i < n; ++i) p[i] = pattern(i + (size_t)seed * 7919);
  return p;
}

/* Host box (x, y, z) of shape w*h*d in a buffer of pitch/height: compares with an expected box
 * from another buffer, and checks every byte outside the box against `outside`. */
static int box_equal(const uint8_t* got, size_t gx, size_t gy, size_t gz, size_t gp, size_t gh, const uint8_t* want,
                     size_t wx, size_t wy, size_t wz, size_t wp, size_t wh, size_t w, size_t h, size_t d) {
  for (size_t k = 0; k < d; ++k)
    for (size_t j = 0; j < h; ++j)
      if (memcmp(got + (gz + k) * gh * gp + (gy + j) * gp + gx, want + (wz + k) * wh * wp + (wy + j) * wp + wx, w))
        return 0;
  return 1;
}

static int outside_untouched(const uint8_t* got, size_t n, size_t x, size_t y, size_t z, size_t p, size_t ph,
                             size_t w, size_t h, size_t d, uint8_t fill) {
  for (size_t i = 0; i < n; ++i) {
    size_t zz = i / (p * ph), yy = i % (p * ph) / p, xx = i % p;
    int inside = zz >= z && zz < z + d && yy >= y && yy < y + h && xx >= x && xx < x + w;
    if (!inside && got[i] != fill) return 0;
  }
  return 1;
}

static CUDA_MEMCPY2D c2(void) {
  CUDA_MEMCPY2D c;
  memset(&c, 0, sizeof c);
  return c;
}

static CUDA_MEMCPY3D c3(void) {
  CUDA_MEMCPY3D c;
  memset(&c, 0, sizeof c);
  return c;
}

/* 2D host -> device -> device -> host. W x H at odd offsets, host pitches wider than W. */
static void test_2d(size_t W, size_t H, CUstream stream) {
  const size_t sp = W + 27, sx = 3, sy = 2;        /* host source */
  const size_t ap = 512 * ((W + 5 + 511) / 512);   /* device A: offset (5, 1) */
  const size_t bp = 256 * ((W + 255) / 256);       /* device B: origin */
  const size_t dp = W + 41, dx = 7, dy = 3;        /* host destination */
  size_t sn = sp * (H + sy), dn = dp * (H + dy + 2);
  uint8_t* src = filled(sn, (int)W);
  uint8_t* dst = malloc(dn);
  memset(dst, 0xAB, dn);
  CUdeviceptr a = 0, b = 0;
  CU(cuMemAlloc(&a, ap * (H + 1)));
  CU(cuMemAlloc(&b, bp * H));
  CU(cuMemsetD8(a, 0, ap * (H + 1)));

  CUDA_MEMCPY2D c = c2();
  c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = src, c.srcPitch = sp, c.srcXInBytes = sx, c.srcY = sy;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = a, c.dstPitch = ap, c.dstXInBytes = 5, c.dstY = 1;
  c.WidthInBytes = W, c.Height = H;
  CU(cuMemcpy2D(&c));

  c = c2();
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = a, c.srcPitch = ap, c.srcXInBytes = 5, c.srcY = 1;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = b, c.dstPitch = bp;
  c.WidthInBytes = W, c.Height = H;
  CU(cuMemcpy2DUnaligned(&c));

  c = c2();
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = b, c.srcPitch = bp;
  c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = dst, c.dstPitch = dp, c.dstXInBytes = dx, c.dstY = dy;
  c.WidthInBytes = W, c.Height = H;
  if (stream) {
    CU(cuMemcpy2DAsync(&c, stream));
    CU(cuStreamSynchronize(stream));
  } else {
    CU(cuMemcpy2D(&c));
  }
  CHECK(box_equal(dst, dx, dy, 0, dp, 0, src, sx, sy, 0, sp, 0, W, H, 1), "2D %zux%zu round trip differs", W, H);
  CHECK(outside_untouched(dst, dn, dx, dy, 0, dp, H + dy + 2, W, H, 1, 0xAB), "2D %zux%zu wrote outside its box", W, H);

  /* The padding of device A around the box stayed zero: read it all back contiguously. */
  uint8_t* whole = malloc(ap * (H + 1));
  CU(cuMemcpyDtoH(whole, a, ap * (H + 1)));
  CHECK(outside_untouched(whole, ap * (H + 1), 5, 1, 0, ap, H + 1, W, H, 1, 0), "2D HtoD %zux%zu wrote outside", W, H);
  CU(cuMemFree(a));
  CU(cuMemFree(b));
  free(whole);
  free(src);
  free(dst);
}

/* Unified addressing: both sides CU_MEMORYTYPE_UNIFIED, the driver (or rgpu) tells host from device. */
static void test_2d_unified(void) {
  const size_t W = 24, H = 6, hp = 32;
  uint8_t* src = filled(hp * H, 5);
  uint8_t* back = malloc(hp * H);
  memset(back, 0, hp * H);
  CUdeviceptr d = 0;
  CU(cuMemAlloc(&d, 256 * H));
  CUDA_MEMCPY2D c = c2();
  c.srcMemoryType = CU_MEMORYTYPE_UNIFIED, c.srcDevice = (CUdeviceptr)(uintptr_t)src, c.srcPitch = hp;
  c.dstMemoryType = CU_MEMORYTYPE_UNIFIED, c.dstDevice = d, c.dstPitch = 256;
  c.WidthInBytes = W, c.Height = H;
  CU(cuMemcpy2D(&c));
  c = c2();
  c.srcMemoryType = CU_MEMORYTYPE_UNIFIED, c.srcDevice = d, c.srcPitch = 256;
  c.dstMemoryType = CU_MEMORYTYPE_UNIFIED, c.dstDevice = (CUdeviceptr)(uintptr_t)back, c.dstPitch = hp;
  c.WidthInBytes = W, c.Height = H;
  CU(cuMemcpy2D(&c));
  CHECK(box_equal(back, 0, 0, 0, hp, 0, src, 0, 0, 0, hp, 0, W, H, 1), "unified 2D round trip differs");
  CU(cuMemFree(d));
  free(src);
  free(back);
}

/* 3D host -> device -> host with offsets in x, y and z and slice heights taller than the copy. */
static void test_3d(size_t W, size_t H, size_t D, CUstream stream) {
  const size_t sp = W + 3, sh = H + 2, sx = 1, sy = 1, sz = 1;
  const size_t vp = 256 * ((W + 2 + 255) / 256), vh = H + 1;
  const size_t dp = W + 7, dh = H + 3, dx = 2, dy = 2, dz = 1;
  size_t sn = sp * sh * (D + sz), dn = dp * dh * (D + dz + 1);
  uint8_t* src = filled(sn, (int)(W + D));
  uint8_t* dst = malloc(dn);
  memset(dst, 0xCD, dn);
  CUdeviceptr v = 0;
  CU(cuMemAlloc(&v, vp * vh * D));

  CUDA_MEMCPY3D c = c3();
  c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = src, c.srcPitch = sp, c.srcHeight = sh;
  c.srcXInBytes = sx, c.srcY = sy, c.srcZ = sz;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = v, c.dstPitch = vp, c.dstHeight = vh;
  c.dstXInBytes = 2, c.dstY = 1;
  c.WidthInBytes = W, c.Height = H, c.Depth = D;
  if (stream) {
    CU(cuMemcpy3DAsync(&c, stream));
  } else {
    CU(cuMemcpy3D(&c));
  }

  c = c3();
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = v, c.srcPitch = vp, c.srcHeight = vh;
  c.srcXInBytes = 2, c.srcY = 1;
  c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = dst, c.dstPitch = dp, c.dstHeight = dh;
  c.dstXInBytes = dx, c.dstY = dy, c.dstZ = dz;
  c.WidthInBytes = W, c.Height = H, c.Depth = D;
  if (stream) {
    CU(cuMemcpy3DAsync(&c, stream));
    CU(cuStreamSynchronize(stream));
  } else {
    CU(cuMemcpy3D(&c));
  }
  CHECK(box_equal(dst, dx, dy, dz, dp, dh, src, sx, sy, sz, sp, sh, W, H, D), "3D %zux%zux%zu round trip differs", W,
        H, D);
  CHECK(outside_untouched(dst, dn, dx, dy, dz, dp, dh, W, H, D, 0xCD), "3D %zux%zux%zu wrote outside its box", W, H, D);
  CU(cuMemFree(v));
  free(src);
  free(dst);
}

/* CUDA arrays as copy sides, and texture/surface objects over them and over linear memory. The
 * fake driver has no arrays or textures (CUDA_ERROR_NOT_SUPPORTED): then this part is skipped,
 * saying so. */
static void test_arrays_and_textures(void) {
  const size_t W = 40, H = 9, D = 3, hp = 48;
  CUDA_ARRAY3D_DESCRIPTOR ad;
  memset(&ad, 0, sizeof ad);
  ad.Width = W, ad.Height = H, ad.Depth = 0, ad.Format = CU_AD_FORMAT_UNSIGNED_INT8, ad.NumChannels = 1;
  ad.Flags = CUDA_ARRAY3D_SURFACE_LDST;
  CUarray arr = NULL;
  CUresult rc = cuArray3DCreate(&arr, &ad);
  if (rc == CUDA_ERROR_NOT_SUPPORTED) {
    printf("skip: arrays and texture objects (the driver has no arrays: the fake)\n");
    return;
  }
  CHECK(rc == CUDA_SUCCESS, "cuArray3DCreate returned %d", (int)rc);
  if (rc != CUDA_SUCCESS) return;
  uint8_t* src = filled(hp * H, 11);
  uint8_t* back = malloc(hp * H);
  memset(back, 0x5A, hp * H);
  CUDA_MEMCPY2D c = c2();
  c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = src, c.srcPitch = hp;
  c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = arr;
  c.WidthInBytes = W, c.Height = H;
  CU(cuMemcpy2D(&c));
  c = c2();
  c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = arr, c.srcXInBytes = 4, c.srcY = 2;
  c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = back, c.dstPitch = hp;
  c.WidthInBytes = W - 4, c.Height = H - 2;
  CU(cuMemcpy2D(&c));
  CHECK(box_equal(back, 0, 0, 0, hp, 0, src, 4, 2, 0, hp, 0, W - 4, H - 2, 1), "2D array round trip differs");

  CUDA_RESOURCE_DESC res;
  memset(&res, 0, sizeof res);
  res.resType = CU_RESOURCE_TYPE_ARRAY, res.res.array.hArray = arr;
  CUDA_TEXTURE_DESC tex;
  memset(&tex, 0, sizeof tex);
  tex.addressMode[0] = tex.addressMode[1] = CU_TR_ADDRESS_MODE_CLAMP, tex.filterMode = CU_TR_FILTER_MODE_POINT;
  CUtexObject to = 0;
  CU(cuTexObjectCreate(&to, &res, &tex, NULL));
  CHECK(to != 0, "texture object 0");
  CUDA_RESOURCE_DESC got;
  memset(&got, 0, sizeof got);
  CU(cuTexObjectGetResourceDesc(&got, to));
  CHECK(got.resType == CU_RESOURCE_TYPE_ARRAY && got.res.array.hArray == arr, "resource desc gives %d %p",
        (int)got.resType, (void*)got.res.array.hArray);
  CU(cuTexObjectDestroy(to));
  CUsurfObject so = 0;
  CU(cuSurfObjectCreate(&so, &res));
  CHECK(so != 0, "surface object 0");
  CU(cuSurfObjectDestroy(so));

  CUdeviceptr lin = 0;
  CU(cuMemAlloc(&lin, 4096));
  memset(&res, 0, sizeof res);
  res.resType = CU_RESOURCE_TYPE_LINEAR, res.res.linear.devPtr = lin, res.res.linear.format = CU_AD_FORMAT_FLOAT;
  res.res.linear.numChannels = 1, res.res.linear.sizeInBytes = 4096;
  CU(cuTexObjectCreate(&to, &res, &tex, NULL));
  memset(&got, 0, sizeof got);
  CU(cuTexObjectGetResourceDesc(&got, to));
  CHECK(got.resType == CU_RESOURCE_TYPE_LINEAR && got.res.linear.devPtr == lin, "linear resource desc differs");
  CU(cuTexObjectDestroy(to));
  CU(cuMemFree(lin));
  CU(cuArrayDestroy(arr));

  /* 3D array round trip. */
  ad.Depth = D, ad.Flags = 0;
  CU(cuArray3DCreate(&arr, &ad));
  uint8_t* s3 = filled(hp * H * D, 12);
  uint8_t* b3 = malloc(hp * H * D);
  memset(b3, 0, hp * H * D);
  CUDA_MEMCPY3D c3d = c3();
  c3d.srcMemoryType = CU_MEMORYTYPE_HOST, c3d.srcHost = s3, c3d.srcPitch = hp, c3d.srcHeight = H;
  c3d.dstMemoryType = CU_MEMORYTYPE_ARRAY, c3d.dstArray = arr;
  c3d.WidthInBytes = W, c3d.Height = H, c3d.Depth = D;
  CU(cuMemcpy3D(&c3d));
  c3d = c3();
  c3d.srcMemoryType = CU_MEMORYTYPE_ARRAY, c3d.srcArray = arr;
  c3d.dstMemoryType = CU_MEMORYTYPE_HOST, c3d.dstHost = b3, c3d.dstPitch = hp, c3d.dstHeight = H;
  c3d.WidthInBytes = W, c3d.Height = H, c3d.Depth = D;
  CU(cuMemcpy3D(&c3d));
  CHECK(box_equal(b3, 0, 0, 0, hp, H, s3, 0, 0, 0, hp, H, W, H, D), "3D array round trip differs");
  CU(cuArrayDestroy(arr));
  free(s3);
  free(b3);
  free(src);
  free(back);
}

int main(void) {
  CUdevice dev;
  CUcontext ctx;
  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  if (g_failures) {
    fprintf(stderr, "no context; stopping\n");
    return 1;
  }
  CUstream stream;
  CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  test_2d(37, 19, NULL);
  test_2d(37, 19, stream);
  test_2d(3000, 4000, NULL);   /* 12 MB: more than one bulk chunk, cut into bands of rows */
  test_2d(10u << 20, 2, NULL); /* rows longer than a chunk: cut within rows */
  test_2d_unified();
  test_3d(13, 7, 5, NULL);
  test_3d(13, 7, 5, stream);
  test_3d(1024, 1024, 11, stream); /* 11 MiB: cut into groups of slices */
  test_arrays_and_textures();

  /* Zero-sized copies do nothing and succeed. */
  CUDA_MEMCPY2D z = c2();
  z.srcMemoryType = CU_MEMORYTYPE_HOST, z.srcHost = &z, z.dstMemoryType = CU_MEMORYTYPE_HOST, z.dstHost = &z;
  CU(cuMemcpy2D(&z));

  CU(cuStreamDestroy(stream));
  CU(cuDevicePrimaryCtxRelease(dev));
  if (g_failures) {
    fprintf(stderr, "%d of %d checks failed\n", g_failures, g_checks);
    return 1;
  }
  printf("all %d checks passed\n", g_checks);
  return 0;
}
