// kvstash_fuzz_seeds DIR [REGRESSION_DIR]: writes the request fuzzer's seed
// inputs into DIR and, when given, the regression inputs (the crashes the
// fuzzer found, tests/fuzz/regression) into REGRESSION_DIR.
#include <cstdio>
#include <fstream>
#include <string>

#include "fuzz_messages.h"

namespace {

bool WriteAll(const std::string& dir, const std::vector<kvstash::fuzz::Input>& inputs) {
  for (const kvstash::fuzz::Input& input : inputs) {
    std::ofstream out(dir + "/" + input.name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(input.bytes.data()),
              std::streamsize(input.bytes.size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s/%s\n", dir.c_str(), input.name.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s SEED_DIR [REGRESSION_DIR]\n", argv[0]);
    return 2;
  }
  if (!WriteAll(argv[1], kvstash::fuzz::Seeds())) return 1;
  if (argc == 3 && !WriteAll(argv[2], kvstash::fuzz::Regressions())) return 1;
  return 0;
}
