// Registering KV memory that lives on a GPU (kvstashd's cuda backend).
//
//   kvstash::RegisterOptions options;
//   options.model = "llama-3-8b";
//   std::vector<kvstash::CudaLayer> layers;
//   for (int l = 0; l < 32; ++l) layers.push_back({kv_caches[l].data_ptr(), geometry});
//   kvstash::Status s = kvstash::AddCudaLayers(layers, options);
//   auto reg = client->RegisterKV(options).get();
//
// For each layer this finds the CUDA allocation that holds it
// (cuMemGetAddressRange), shares that allocation once, however many layers
// it holds, through cudaIpcGetMemHandle, and describes the layer by its
// offset inside it and the GPU's UUID. No CUDA types here: device addresses
// are plain pointers.
//
// Synchronisation: kvstashd reads blocks on its own streams. Before Store,
// the engine must have finished writing those blocks (cudaStreamSynchronize
// of the stream that wrote them, or an event it waited on): a store is a
// host-side request and sees only completed writes. Retrieve replies once
// the data is in GPU memory; work the engine enqueues after the reply sees it.
#pragma once

#include <vector>

#include "kvstash/client_types.h"
#include "kvstash/geometry.h"
#include "kvstash/status.h"

namespace kvstash {

struct CudaLayer {
  const void* data = nullptr;  // device address of the layer base (block 0, kv 0, token 0, head 0)
  LayerGeometry geometry;
};

// Appends to options.allocations one CudaIpc per allocation the layers live
// in (reusing one already there for the same allocation) and to
// options.layers one LayerDesc per layer, in order. On error, options is
// left as it was. Errors:
//   Unavailable      libkvstash was built without CUDA, or no CUDA driver;
//   InvalidArgument  a pointer is not device memory, the layers span several
//                    GPUs, or the memory cannot be shared through CUDA IPC
//                    (virtual-memory allocations such as PyTorch's
//                    expandable segments, stream-ordered pools); the message
//                    names the cause and the fix;
//   OutOfRange       a layer's extent passes the end of its allocation.
Status AddCudaLayers(const std::vector<CudaLayer>& layers, RegisterOptions& options);

}  // namespace kvstash
