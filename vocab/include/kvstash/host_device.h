// KVSTASH_HOST_DEVICE marks inline functions shared by CUDA kernels and their
// CPU twins, so both compute the same addresses from the same code.
#pragma once

#if defined(__CUDACC__)
#define KVSTASH_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KVSTASH_HOST_DEVICE inline
#endif
