/* An engine compiled against kvstash.h as libkvstash.so.0 first shipped it
 * (kvstash_so0.h), run against whatever libkvstash it is linked with: it
 * connects to the kvstashd named by argv[1] and registers two layers of host
 * shared memory. Each struct sits at the start of a buffer filled with 0xAB,
 * as an engine's stack may hold anything past a struct: a library that reads
 * further than the engine's kvstash.h declared reads that.
 *
 * Exit 0: it worked, or kvstash_connect refused it with
 * KVSTASH_INVALID_ARGUMENT naming struct_size (the rule of today's kvstash.h).
 * Exit 1: anything else, such as a refusal for fields it never set. A crash
 * is a signal. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvstash_so0.h"

enum { kGarbage = 0xAB, kBlocks = 8, kBlockTokens = 16, kHeads = 2, kHeadBytes = 64 };

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s SOCKET\n", argv[0]);
    return 2;
  }
  union {
    kvstash_options options;
    unsigned char bytes[256];
  } connect_args;
  memset(&connect_args, kGarbage, sizeof connect_args);
  connect_args.options.socket = argv[1];
  connect_args.options.timeout_ms = 5000;
  connect_args.options.client_name = "so0-engine";
  kvstash_client* client = NULL;
  kvstash_status status = kvstash_connect(&connect_args.options, &client);
  const char* why = client ? kvstash_last_error(client) : "";
  if (status == KVSTASH_INVALID_ARGUMENT && strstr(why, "struct_size") != NULL) {
    printf("refused at connect, as it should be: %s\n", why);
    kvstash_close(client);
    return 0;
  }
  if (status != KVSTASH_OK) {
    printf("connect: %s: %s\n", kvstash_status_name(status), why);
    kvstash_close(client);
    return 1;
  }

  /* Two layers, NHD [2, blocks, tokens, heads, head_bytes], in POSIX shm. */
  const uint64_t block_bytes = (uint64_t)kBlockTokens * kHeads * kHeadBytes;
  const uint64_t layer_bytes = 2 * kBlocks * block_bytes;
  char name[64];
  snprintf(name, sizeof name, "/kvstash-so0-engine-%d", (int)getpid());
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)(2 * layer_bytes)) != 0) {
    perror("shm_open");
    return 1;
  }
  close(fd);
  kvstash_geometry geometry;
  memset(&geometry, 0, sizeof geometry);
  geometry.num_blocks = kBlocks;
  geometry.kv_count = 2;
  geometry.block_tokens = kBlockTokens;
  geometry.num_heads = kHeads;
  geometry.head_bytes = kHeadBytes;
  geometry.block_stride = block_bytes;
  geometry.kv_stride = kBlocks * block_bytes;
  geometry.token_stride = (uint64_t)kHeads * kHeadBytes;
  geometry.head_stride = kHeadBytes;
  geometry.dtype = KVSTASH_DTYPE_BF16;
  kvstash_allocation allocation;
  memset(&allocation, 0, sizeof allocation);
  allocation.kind = KVSTASH_ALLOCATION_SHM;
  allocation.shm_name = name;
  allocation.size_bytes = 2 * layer_bytes;
  kvstash_layer layers[2] = {{0, 0, geometry}, {0, layer_bytes, geometry}};

  union {
    kvstash_register_options options;
    unsigned char bytes[256];
  } register_args;
  memset(&register_args, kGarbage, sizeof register_args);
  register_args.options.model = "so0-model";
  register_args.options.tenant_salt = NULL;
  register_args.options.tp_rank = 0;
  register_args.options.tp_size = 1;
  register_args.options.allocations = &allocation;
  register_args.options.num_allocations = 1;
  register_args.options.layers = layers;
  register_args.options.num_layers = 2;
  union {
    kvstash_registration registration;
    unsigned char bytes[256];
  } out;
  memset(&out, kGarbage, sizeof out);
  status = kvstash_register(client, &register_args.options, &out.registration);
  printf("register: %s %s\n", kvstash_status_name(status), kvstash_last_error(client));
  if (status == KVSTASH_OK) kvstash_unregister(client, out.registration.id);
  kvstash_close(client);
  shm_unlink(name);
  return status == KVSTASH_OK ? 0 : 1;
}
