// The C ABI's versioning (kvstash.h, "The ABI"): an engine built against an
// older kvstash.h either works or is refused with KVSTASH_INVALID_ARGUMENT,
// never crashes; the library writes no byte past what the caller declared.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "daemon_process.h"
#include "kvstash/completion_board.h"
#include "kvstash/kvstash.h"

namespace kvstash::testing {
namespace {

TEST(CApiAbi, AnEngineOfTheFirstHeaderIsRefusedClearlyNeverCrashes) {
  auto daemon =
      DaemonProcess::Start({"--chunk-tokens", "64", "--l1-gb", "0.03125", "--l1-slice-mb", "4"});
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  const ProcessResult engine = RunBinary("kvstash_abi_so0_engine", {(*daemon)->socket()});
  EXPECT_EQ(engine.exit_code, 0) << engine.output;
  EXPECT_NE(engine.output.find("struct_size"), std::string::npos) << engine.output;
}

// A struct of a newer kvstash.h: this one with `extra` more bytes at its end.
template <typename T, size_t kExtra = 16>
struct Newer {
  T known;
  unsigned char extra[kExtra];
};

TEST(CApiAbi, OutputsOfANewerHeaderKeepTheBytesThisLibraryDoesNotKnow) {
  auto daemon = DaemonProcess::Start({"--l1-gb", "0.03125", "--l1-slice-mb", "4"});
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  kvstash_options options = KVSTASH_OPTIONS_INIT;
  options.socket = (*daemon)->socket().c_str();
  kvstash_client* client = nullptr;
  ASSERT_EQ(kvstash_connect(&options, &client), KVSTASH_OK) << kvstash_last_error(client);
  Newer<kvstash_server_info> info;
  std::memset(&info, 0xCD, sizeof(info));
  info.known.struct_size = sizeof(info);
  ASSERT_EQ(kvstash_get_server_info(client, &info.known), KVSTASH_OK) << kvstash_last_error(client);
  EXPECT_STREQ(info.known.backend, "host");
  EXPECT_EQ(info.known.struct_size, sizeof(info));
  for (unsigned char b : info.extra) EXPECT_EQ(b, 0xCD);
  kvstash_close(client);
}

TEST(CApiAbi, ConnectRefusesASizeNoHeaderDeclares) {
  kvstash_client* client = nullptr;
  kvstash_options options = KVSTASH_OPTIONS_INIT;
  options.socket = "ipc:///nonexistent/kvstash-abi-test.sock";
  for (size_t size : {size_t{0}, size_t{8}, reinterpret_cast<size_t>(&options)}) {
    options.struct_size = size;
    EXPECT_EQ(kvstash_connect(&options, &client), KVSTASH_INVALID_ARGUMENT) << size;
    EXPECT_NE(std::string(kvstash_last_error(client)).find("kvstash_options.struct_size"),
              std::string::npos)
        << kvstash_last_error(client);
    kvstash_close(client);
  }
}

TEST(CApiAbi, InputsOfANewerHeaderPassWhenTheirNewFieldsAreUnset) {
  Newer<kvstash_options> newer{};
  newer.known.struct_size = sizeof(newer);
  newer.known.socket = "ipc:///nonexistent/kvstash-abi-test.sock";
  kvstash_client* client = nullptr;
  // Past the size check: nothing listens there.
  EXPECT_EQ(kvstash_connect(&newer.known, &client), KVSTASH_UNAVAILABLE)
      << kvstash_last_error(client);
  kvstash_close(client);
  newer.extra[3] = 1;  // a field this library lacks, set
  EXPECT_EQ(kvstash_connect(&newer.known, &client), KVSTASH_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvstash_last_error(client)).find("does not know"), std::string::npos)
      << kvstash_last_error(client);
  kvstash_close(client);
}

TEST(CApiAbi, KeysNeedARegistrationWithItsSize) {
  kvstash_registration reg = KVSTASH_REGISTRATION_INIT;
  reg.chunk_tokens = 16;
  reg.block_tokens = 16;
  const int32_t tokens[16] = {};
  kvstash_key key;
  EXPECT_EQ(kvstash_num_chunks(&reg, 16), 1u);
  EXPECT_EQ(kvstash_chunk_keys(&reg, tokens, 16, &key), KVSTASH_OK);
  reg.struct_size = 0;
  EXPECT_EQ(kvstash_num_chunks(&reg, 16), 0u);
  EXPECT_EQ(kvstash_chunk_keys(&reg, tokens, 16, &key), KVSTASH_INVALID_ARGUMENT);
}

TEST(CApiAbi, TheLoadedLibraryIsTheHeadersAbi) {
  EXPECT_EQ(kvstash_abi_version(), uint32_t{KVSTASH_ABI_VERSION});
}

// Bindings (Python) read the board's limits and layer-range split from the
// library: they must be the ones kvstashd checks and slices by.
TEST(CApiAbi, TheBoardLimitsAndLayerRangesAreTheDaemons) {
  EXPECT_EQ(kvstash_max_board_slots(), kMaxBoardSlots);
  EXPECT_EQ(kvstash_max_layer_ranges(), kMaxLayerRanges);
  EXPECT_EQ(kvstash_max_board_slots(), KVSTASH_MAX_BOARD_SLOTS);
  EXPECT_EQ(kvstash_max_layer_ranges(), KVSTASH_MAX_LAYER_RANGES);
  for (uint32_t layers : {1u, 2u, 7u, 61u, 80u, 300u, 1000u}) {
    for (uint32_t ranges = 1; ranges <= std::min(layers, kMaxLayerRanges); ++ranges) {
      EXPECT_EQ(kvstash_layer_range_begin(layers, ranges, 0), 0u);
      EXPECT_EQ(kvstash_layer_range_begin(layers, ranges, ranges), layers);
      for (uint32_t k = 0; k < ranges; ++k) {
        const uint32_t begin = kvstash_layer_range_begin(layers, ranges, k);
        const uint32_t end = kvstash_layer_range_begin(layers, ranges, k + 1);
        ASSERT_EQ(begin, LayerRangeBegin(layers, ranges, k));
        ASSERT_LT(begin, end) << layers << " layers, " << ranges << " ranges, range " << k;
        ASSERT_EQ(LayerRangeOf(layers, ranges, begin), k);
        ASSERT_EQ(LayerRangeOf(layers, ranges, end - 1), k);
      }
    }
  }
  EXPECT_EQ(kvstash_layer_range_begin(8, 0, 0), 0u);
  EXPECT_EQ(kvstash_layer_range_begin(8, 2, 3), 0u);
}

}  // namespace
}  // namespace kvstash::testing
