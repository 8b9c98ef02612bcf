/* A tiny stand-in for cuda.h for the generator's golden tests: a few handles, plain and
 * non-plain structs, and one function per marshalling rule and per reason to refuse one. */
#pragma once
#include <stddef.h>

#define CUDAAPI

typedef enum cudaError_enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1 } CUresult;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef enum CUattr_enum { CU_ATTR_A = 1 } CUattr;
typedef struct CUplain_st {
  unsigned int x;
  size_t y;
  int arr[4];
  struct { float f; } inner;
} CUplain;
typedef struct CUnested_st {
  CUplain p;
  union { int i; unsigned char b[8]; } u;
} CUnested;
typedef struct CUptrs_st { void *p; unsigned int n; } CUptrs;
typedef struct CUwithHandle_st { CUstream s; } CUwithHandle;
typedef void (*CUcallback)(void *user);
typedef int *CUintPtr;

/* hand-written */
CUresult CUDAAPI cuInit(unsigned int Flags);                                  /* local */
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n);   /* custom */

/* generated */
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize);             /* scalar output */
CUresult CUDAAPI cuMemFree(CUdeviceptr dptr);                                /* oneway */
CUresult CUDAAPI cuMemsetD8(CUdeviceptr dst, unsigned char uc, size_t N);    /* oneway */
CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags);     /* mint + oneway */
CUresult CUDAAPI cuStreamDestroy(CUstream hStream);                          /* destroys + oneway */
CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx);                           /* handle output */
CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream);            /* handle inputs */
CUresult CUDAAPI cuPlainSet(const CUplain *pValue, CUnested nested);         /* struct in, by value */
CUresult CUDAAPI cuPlainGet(CUplain *pValue, CUattr attr, float scale, double d2); /* struct out */
CUresult CUDAAPI cuNameLookup(CUdeviceptr *dptr, const char *name);          /* string input */
CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev);         /* outstr= */
CUresult CUDAAPI cuBufferIn(const void *data, unsigned int count);           /* in= */
CUresult CUDAAPI cuBufferOut(void *data, size_t bytes);                      /* out= */
CUresult CUDAAPI cuExchange(CUattr *mode);                                   /* inout= */
CUresult CUDAAPI cuScaleOne(size_t *value, unsigned int numChannels);        /* elem= */
CUresult CUDAAPI cuNoArgs(void);

/* unsupported, one per reason */
CUresult CUDAAPI cuPtrToPtr(void **pp);
CUresult CUDAAPI cuUntyped(void *p);
CUresult CUDAAPI cuCallback(CUcallback fn);
CUresult CUDAAPI cuPtrStruct(const CUptrs *p);
CUresult CUDAAPI cuHandleStruct(CUwithHandle value);
CUresult CUDAAPI cuHandleArray(const CUstream *streams, unsigned int numStreams);
CUresult CUDAAPI cuArrayOut(CUevent *events, unsigned int numEvents);
CUresult CUDAAPI cuConstScalars(const int *values);
CUresult CUDAAPI cuCharBuf(char *buf);
CUresult CUDAAPI cuUnclear(CUplain *value);
CUresult CUDAAPI cuCountInOut(size_t *count, int *other);
CUresult CUDAAPI cuHidden(CUintPtr p);
CUresult CUDAAPI cuDenied(unsigned int x);
int CUDAAPI cuNotResult(void);
