/* The C API, compiled as C: bring-up on an emulated controller, set-up writes, a layer streamer
 * over synthetic extents (unaligned starts), an expert fetcher with and without an LRU cache,
 * error codes and messages. Exit 0 when every check passed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme.h"

#include "capi_check.h"

enum { LBA = 512, BASE_LBA = 2048, AREA_BLOCKS = 8192 };

static uint8_t pattern_at(uint64_t device_byte) {
  uint64_t x = (device_byte >> 3) * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return (uint8_t)(x >> ((device_byte & 7) * 8));
}

static int bytes_match(const uint8_t* got, const gpunvme_extent_t* e) {
  const uint64_t first = e->first_lba * LBA + e->byte_in_first;
  for (uint64_t i = 0; i < e->byte_length; ++i)
    if (got[i] != pattern_at(first + i)) return 0;
  return 1;
}

static gpunvme_extent_t extent(uint64_t device_byte, uint64_t length) {
  gpunvme_extent_t e;
  memset(&e, 0, sizeof e);
  e.first_lba = device_byte / LBA;
  e.byte_in_first = (uint32_t)(device_byte % LBA);
  e.byte_length = length;
  e.lba_count = (device_byte + length + LBA - 1) / LBA - e.first_lba;
  return e;
}

int main(void) {
  gpunvme_ctrl_t* ctrl = NULL;
  gpunvme_queue_t* q = NULL;

  /* Errors: a bad device string, with a message naming it. */
  CHECK(gpunvme_ctrl_init(&ctrl, "emu:ram,size=banana") == GPUNVME_ERR_INVALID_ARGUMENT);
  CHECK(ctrl == NULL);
  CHECK(strlen(gpunvme_last_error_message()) > 0);
  CHECK(strcmp(gpunvme_strerror(GPUNVME_OK), "success") == 0);
  CHECK(strcmp(gpunvme_strerror(GPUNVME_ERR_TIMEOUT), "timed out") == 0);
  CHECK(gpunvme_ctrl_init(NULL, "emu:ram") == GPUNVME_ERR_INVALID_ARGUMENT);

  OK(gpunvme_ctrl_init(&ctrl, "emu:ram,size=16M,lba=512,mdts=2"));
  CHECK(strlen(gpunvme_last_error_message()) == 0);
  gpunvme_ctrl_info_t info;
  OK(gpunvme_ctrl_info(ctrl, &info));
  CHECK(info.io_queues >= 1);
  CHECK(info.page_bytes == 4096);
  CHECK(info.max_transfer_bytes == 16384);
  uint64_t blocks = 0;
  uint32_t lba = 0;
  OK(gpunvme_ns_info(ctrl, 1, &blocks, &lba));
  CHECK(lba == LBA);
  CHECK(blocks == 16u * 1024 * 1024 / LBA);
  CHECK(gpunvme_ns_info(ctrl, 7, &blocks, &lba) == GPUNVME_ERR_NOT_FOUND);
  OK(gpunvme_create_io_queue(ctrl, 1, 64, &q));

  /* Set-up: the pattern onto AREA_BLOCKS blocks from BASE_LBA, read back. */
  uint8_t* area = malloc((size_t)AREA_BLOCKS * LBA);
  for (uint64_t i = 0; i < (uint64_t)AREA_BLOCKS * LBA; ++i) area[i] = pattern_at((uint64_t)BASE_LBA * LBA + i);
  OK(gpunvme_write(q, 1, BASE_LBA, AREA_BLOCKS, area));
  uint8_t* back = malloc((size_t)AREA_BLOCKS * LBA);
  OK(gpunvme_read(q, 1, BASE_LBA, AREA_BLOCKS, back));
  CHECK(memcmp(area, back, (size_t)AREA_BLOCKS * LBA) == 0);
  free(back);

  /* Streamer: 6 layers of 3 extents, sizes and starts not block aligned. */
  enum { LAYERS = 6, PER = 3 };
  gpunvme_extent_t ex[LAYERS * PER];
  uint32_t first[LAYERS + 1];
  uint64_t at = (uint64_t)BASE_LBA * LBA + 100;
  for (int l = 0; l < LAYERS; ++l) {
    first[l] = (uint32_t)(l * PER);
    for (int k = 0; k < PER; ++k) {
      const uint64_t len = 50000 + 12345 * (uint64_t)k + 777 * (uint64_t)l;
      ex[l * PER + k] = extent(at, len);
      at += len + 36;
    }
  }
  first[LAYERS] = LAYERS * PER;
  CHECK(at < (uint64_t)(BASE_LBA + AREA_BLOCKS) * LBA);
  gpunvme_streamer_t* s = NULL;
  gpunvme_streamer_opts_t so;
  memset(&so, 0, sizeof so);
  OK(gpunvme_streamer_create(q, ex, first, LAYERS, &so, &s));
  OK(gpunvme_streamer_begin(s, 0, 0));
  for (uint32_t l = 0; l < LAYERS; ++l) {
    if (l + 1 < LAYERS) OK(gpunvme_streamer_begin(s, l + 1, (l + 1) % 2));
    gpunvme_slot_view_t v;
    OK(gpunvme_streamer_wait(s, l % 2, &v));
    CHECK(v.layer == l);
    CHECK(v.n_pieces == PER);
    for (uint32_t k = 0; k < v.n_pieces; ++k) {
      uint64_t off = 0, len = 0;
      OK(gpunvme_streamer_piece(s, l % 2, k, &off, &len));
      CHECK(len == ex[l * PER + k].byte_length);
      CHECK(bytes_match((const uint8_t*)v.host + off, &ex[l * PER + k]));
    }
    /* A held slot cannot be begun again. */
    CHECK(gpunvme_streamer_begin(s, 0, l % 2) == GPUNVME_ERR_INVALID_ARGUMENT);
    CHECK(strstr(gpunvme_last_error_message(), "release") != NULL);
    OK(gpunvme_streamer_release(s, l % 2));
  }
  gpunvme_stream_stats_t st;
  OK(gpunvme_streamer_stats(s, &st));
  CHECK(st.layers == LAYERS);
  CHECK(st.bytes > 0);
  CHECK(st.prp_bytes > 0);
  CHECK(st.template_bytes > 0);
  CHECK(gpunvme_streamer_begin(s, LAYERS, 0) == GPUNVME_ERR_INVALID_ARGUMENT);
  /* The queue cannot go while a streamer uses it. */
  CHECK(gpunvme_delete_io_queue(q) == GPUNVME_ERR_INVALID_ARGUMENT);
  OK(gpunvme_streamer_destroy(s));

  /* Fetcher: 2 layers x 6 experts x 3 parts (gate, up, down) of odd sizes. */
  enum { FL = 2, FE = 6, FP = 3 };
  gpunvme_extent_t parts[FL * FE * FP];
  at = (uint64_t)BASE_LBA * LBA + 4;
  for (int i = 0; i < FL * FE * FP; ++i) {
    const uint64_t len = 9000 + 1000 * (uint64_t)(i % FP);
    parts[i] = extent(at, len);
    at += len + 20;
  }
  for (int cached = 0; cached < 2; ++cached) {
    gpunvme_fetcher_t* f = NULL;
    gpunvme_fetcher_opts_t fo;
    memset(&fo, 0, sizeof fo);
    fo.max_experts_per_fetch = 2;
    fo.cache_bytes = cached ? 3 * 40960 : 0;  /* 3 experts of 10 pages */
    OK(gpunvme_fetcher_create(q, parts, FL, FE, FP, &fo, &f));
    const uint32_t route[][2] = {{0, 1}, {1, 2}, {0, 3}, {3, 0}, {3, 3}};
    for (int t = 0; t < 5; ++t) {
      const uint32_t layer = (uint32_t)(t % FL);
      uint32_t n = 0;
      OK(gpunvme_fetcher_fetch(f, layer, route[t], 2, &n));
      CHECK(n == (route[t][0] == route[t][1] ? 1u : 2u));
      const void* sp = NULL;
      uint64_t sp_bytes = 0;
      OK(gpunvme_fetcher_scratchpad(f, &sp, NULL, &sp_bytes));
      for (uint32_t i = 0; i < n; ++i) {
        OK(gpunvme_fetcher_wait(f, i));
        int ready = 0;
        OK(gpunvme_fetcher_ready(f, i, &ready));
        CHECK(ready == 1);
        gpunvme_fetched_expert_t fe;
        OK(gpunvme_fetcher_expert(f, i, &fe));
        CHECK(fe.expert == route[t][i]);
        CHECK(fe.n_parts == FP);
        for (uint32_t k = 0; k < fe.n_parts; ++k) {
          gpunvme_projection_t proj;
          uint64_t off = 0, len = 0;
          OK(gpunvme_fetcher_part(f, i, k, &proj, &off, &len));
          CHECK(proj == (gpunvme_projection_t)k);
          CHECK(off + len <= sp_bytes);
          CHECK(bytes_match((const uint8_t*)sp + off, &parts[(layer * FE + fe.expert) * FP + k]));
        }
      }
    }
    gpunvme_fetch_metrics_t m;
    OK(gpunvme_fetcher_metrics(f, &m));
    CHECK(m.tokens == 5);
    CHECK(m.requested == 9);
    if (cached) {
      CHECK(m.cache_capacity == 3);
      /* t0 L0{0,1} 2 faults; t1 L1{1,2} 2 faults (evicts L0:0); t2 L0{0,3}: both fault (evicts L0:1, L1:1);
       * t3 L1{3,0}: 2 faults (evicts L1:2, L0:0); t4 L0{3}: a hit. */
      CHECK(m.faults == 8);
      CHECK(m.hits == 1);
      uint32_t res[FL];
      OK(gpunvme_fetcher_resident(f, res, FL));
      CHECK(res[0] + res[1] == 3);
    } else {
      CHECK(m.cache_capacity == 0);
      CHECK(m.faults == 9);
    }
    OK(gpunvme_fetcher_destroy(f));
  }

  CHECK(gpunvme_ctrl_shutdown(ctrl) == GPUNVME_ERR_INVALID_ARGUMENT); /* a queue is still open */
  CHECK(gpunvme_streamer_begin(NULL, 0, 0) == GPUNVME_ERR_INVALID_ARGUMENT);
  CHECK(strstr(gpunvme_last_error_message(), "NULL") != NULL);
  OK(gpunvme_delete_io_queue(q));
  OK(gpunvme_ctrl_shutdown(ctrl));
  free(area);
  printf("%d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
