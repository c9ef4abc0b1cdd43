// The arguments of a small `kvstash bench` workload (4 layers, 4 prompts of
// 300 tokens sharing 128), for tests that run the CLI against a daemon.
#pragma once

#include <string>
#include <vector>

namespace kvstash::testing {

inline const std::vector<std::string> kSmallBenchShape = {"--layers",
                                                          "4",
                                                          "--kv-heads",
                                                          "2",
                                                          "--head-dim",
                                                          "64",
                                                          "--block-tokens",
                                                          "16",
                                                          "--prompts",
                                                          "4",
                                                          "--prompt-tokens",
                                                          "300",
                                                          "--shared-prefix-tokens",
                                                          "128"};

}  // namespace kvstash::testing
