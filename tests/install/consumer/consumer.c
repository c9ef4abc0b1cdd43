/* An engine written in C, built against an installed kvstash: connects to
 * the kvstashd named by argv[1] and pings it through libkvstash's C API. */
#include <stdio.h>

#include <kvstash/kvstash.h>

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s SOCKET\n", argv[0]);
    return 2;
  }
  kvstash_options options = KVSTASH_OPTIONS_INIT;
  options.socket = argv[1];
  options.timeout_ms = 5000;
  options.client_name = "install-test-c";
  kvstash_client* client = NULL;
  kvstash_status status = kvstash_connect(&options, &client);
  uint64_t uptime_ms = 0;
  if (status == KVSTASH_OK) status = kvstash_ping(client, &uptime_ms);
  if (status != KVSTASH_OK) {
    fprintf(stderr, "C consumer: %s: %s\n", kvstash_status_name(status),
            client ? kvstash_last_error(client) : "");
    kvstash_close(client);
    return 1;
  }
  printf("C consumer: ping %s, daemon up %llu ms\n", kvstash_status_name(status),
         (unsigned long long)uptime_ms);
  kvstash_close(client);
  return 0;
}
