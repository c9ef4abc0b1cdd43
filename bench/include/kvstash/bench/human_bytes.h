// Byte counts for people: "4.0 MiB". Used by the bench reports and the
// CLI's tables.
#pragma once

#include <string>

namespace kvstash::bench {

std::string HumanBytes(double bytes);

}  // namespace kvstash::bench
