// The generic JSON renderer behind `kvstash describe` and `kvstash stats`.
#include "json_table.h"

#include <gtest/gtest.h>

namespace kvstash::cli {
namespace {

using json = nlohmann::ordered_json;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(JsonTable, RendersScalarsAlignedAndObjectsAsSections) {
  const json doc = {{"server", {{"version", "0.1.0"}, {"uptime_ms", 1234}}},
                    {"pool", {{"capacity_bytes", 4294967296ull}, {"pinned_fraction", 0.5}}},
                    {"backend", "host"}};
  const std::string text = RenderJson(doc);
  EXPECT_TRUE(Contains(text, "backend  host\n")) << text;
  EXPECT_TRUE(Contains(text, "# server\n")) << text;
  EXPECT_TRUE(Contains(text, "version    0.1.0\n")) << text;
  EXPECT_TRUE(Contains(text, "capacity_bytes   4294967296 (4.0 GiB)\n")) << text;
  EXPECT_TRUE(Contains(text, "pinned_fraction  0.5\n")) << text;
}

TEST(JsonTable, RendersArraysOfObjectsAsTablesWithNestedRowsAfter) {
  const json doc = {{"registrations",
                     {{{"id", 1},
                       {"model", "llama"},
                       {"chunk_bytes", 4194304},
                       {"groups",
                        {{{"layers", {0, 1, 2, 3, 5}},
                          {"offset_bytes", 0},
                          {"geometry", {{"num_heads", 8}, {"head_bytes", 256}}}}}}},
                      {{"id", 2}, {"model", "qwen"}, {"extra", true}}}}};
  const std::string text = RenderJson(doc);
  EXPECT_TRUE(Contains(text, "# registrations\n")) << text;
  EXPECT_TRUE(Contains(text, "id  model  chunk_bytes  extra\n")) << text;
  EXPECT_TRUE(Contains(text, "1   llama  4.0 MiB")) << text;
  EXPECT_TRUE(Contains(text, "2   qwen                true")) << text;
  EXPECT_TRUE(Contains(text, "# registrations[0].groups\n")) << text;
  EXPECT_TRUE(Contains(text, "layers  offset_bytes  num_heads  head_bytes\n")) << text;
  EXPECT_TRUE(Contains(text, "0-3,5   0 B           8          256 B")) << text;
}

TEST(JsonTable, NestedFieldsThatCollideKeepTheirParentsName) {
  const json rows = json::array({{{"size", 1}, {"inner", {{"size", 2}}}}});
  const std::string text = RenderJson(rows);
  EXPECT_TRUE(Contains(text, "size  inner.size\n")) << text;
}

TEST(JsonTable, LongListsAreCut) {
  json list = json::array();
  for (int i = 0; i < 40; ++i) list.push_back(i * 2);
  const std::string text = RenderJson({{"even", list}});
  EXPECT_TRUE(Contains(text, ",... (40 items)")) << text;
}

TEST(JsonTable, HumanBytes) {
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(64.0 * (1 << 30)), "64.0 GiB");
}

}  // namespace
}  // namespace kvstash::cli
