/*
 * The few CUDA driver types that CUPTI's headers name, for building the
 * collector where the toolkit's cuda.h is not installed (Debian ships
 * libcupti-dev without it). Declarations only: the collector never calls
 * the driver. On the include path after the system's, so a toolkit's own
 * cuda.h is used where there is one.
 */
#ifndef TORCHPROBE_CUPTI_COMPAT_CUDA_H
#define TORCHPROBE_CUPTI_COMPAT_CUDA_H

#include <stddef.h>

#define CUDA_VERSION 11080 /* what CUPTI 11.8's headers were written against */

typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphNode_st* CUgraphNode;
typedef struct CUgraphExec_st* CUgraphExec;
typedef struct CUaccessPolicyWindow_st CUaccessPolicyWindow; /* used through pointers only */
typedef struct CUuuid_st {
	char bytes[16];
} CUuuid;
typedef enum CUdevice_attribute_enum { CU_DEVICE_ATTRIBUTE_MAX = 0x7fffffff } CUdevice_attribute;
typedef enum CUgraphNodeType_enum { CU_GRAPH_NODE_TYPE_MAX = 0x7fffffff } CUgraphNodeType;
typedef enum cudaError_enum { CUDA_SUCCESS = 0 } CUresult;

#endif /* TORCHPROBE_CUPTI_COMPAT_CUDA_H */
