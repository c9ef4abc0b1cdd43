// The in-process baseline of `kvstash bench --backend cuda`: what an engine
// would write itself instead of kvstash (torch's index_select over every
// layer, then one copy): a gather kernel of the chunk's blocks of every
// layer into a contiguous GPU buffer and one cudaMemcpyAsync to pinned host
// memory; the reverse for a load (one copy in, then a scatter kernel).
// Not thread-safe; one per layout.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kvstash/cuda/buffers.h"
#include "kvstash/cuda/streams.h"
#include "kvstash/geometry.h"
#include "kvstash/status.h"

namespace kvstash::bench {

class BaselineCopy {
 public:
  // Layers of one geometry; room for `max_blocks` blocks per request.
  static Result<std::unique_ptr<BaselineCopy>> Create(const std::vector<const uint8_t*>& layers,
                                                      const LayerGeometry& geometry,
                                                      uint32_t max_blocks);
  // Seconds of one save (gather + D2H) or load (H2D + scatter) of `blocks`,
  // from the call to the completion of an event recorded after it.
  Result<double> Save(const std::vector<uint32_t>& blocks);
  Result<double> Load(const std::vector<uint32_t>& blocks);

 private:
  BaselineCopy() = default;
  Result<double> Run(const std::vector<uint32_t>& blocks, bool save);

  LayerGeometry geometry_{};
  uint32_t num_layers_ = 0;
  uint32_t max_blocks_ = 0;
  cuda::DeviceBuffer layer_bases_;  // [num_layers] const uint8_t*
  cuda::DeviceBuffer block_ids_;    // [max_blocks] uint32_t
  cuda::DeviceBuffer staging_;      // the contiguous GPU buffer
  cuda::PinnedHostBuffer host_;     // its pinned host copy
  cuda::PinnedHostBuffer ids_host_;
  cuda::Stream stream_;
  cuda::Event done_;
};

}  // namespace kvstash::bench
