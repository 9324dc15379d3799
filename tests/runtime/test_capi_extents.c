/* Issue #18 items 1 and 2 through the C API, compiled as C (and run under ASan/UBSan in the
 * sanitizer build): extents whose block range wraps past 2^64, runs past the namespace, or whose
 * bytes overrun their blocks are refused by gpunvme_fetcher_create / gpunvme_streamer_create with
 * GPUNVME_ERR_INVALID_ARGUMENT and a message naming the rule; before the fix the first one killed
 * the process (SIGFPE), the second reported a 0-byte cache hit, and a 1 GiB piece in a 4 KiB slot
 * was handed to the consumer. Exit 0 when every check passed. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gpunvme.h"

#include "capi_check.h"

static gpunvme_extent_t ext(uint64_t first_lba, uint64_t lba_count, uint32_t byte_in_first, uint64_t byte_length) {
  gpunvme_extent_t e;
  memset(&e, 0, sizeof e);
  e.first_lba = first_lba;
  e.lba_count = lba_count;
  e.byte_in_first = byte_in_first;
  e.byte_length = byte_length;
  return e;
}

static int message_has(const char* what) { return strstr(gpunvme_last_error_message(), what) != NULL; }

/* A fetcher of 1 layer x 4 experts x 1 part; expert 0's part is `bad`, the others are valid. */
static gpunvme_err_t fetcher_with(gpunvme_queue_t* q, gpunvme_extent_t bad, uint64_t cache_bytes, gpunvme_fetcher_t** f) {
  gpunvme_extent_t parts[4];
  parts[0] = bad;
  for (int e = 1; e < 4; ++e) parts[e] = ext(4096 + 8 * (uint64_t)e, 8, 0, 4096);
  gpunvme_fetcher_opts_t o;
  memset(&o, 0, sizeof o);
  o.max_experts_per_fetch = 2;
  o.cache_bytes = cache_bytes;
  *f = NULL;
  return gpunvme_fetcher_create(q, parts, 1, 4, 1, &o, f);
}

static gpunvme_err_t streamer_with(gpunvme_queue_t* q, gpunvme_extent_t e, gpunvme_streamer_t** s) {
  const uint32_t first[2] = {0, 1};
  *s = NULL;
  return gpunvme_streamer_create(q, &e, first, 1, NULL, s);
}

int main(void) {
  gpunvme_ctrl_t* ctrl = NULL;
  gpunvme_queue_t* q = NULL;
  OK(gpunvme_ctrl_init(&ctrl, "emu:ram,size=16M,lba=512"));
  OK(gpunvme_create_io_queue(ctrl, 1, 64, &q));
  gpunvme_fetcher_t* f = NULL;
  gpunvme_streamer_t* s = NULL;

  /* Item 1: a block range that wraps past 2^64 (its end, 5, looks inside the namespace). */
  CHECK(fetcher_with(q, ext(10, UINT64_MAX - 4, 0, 512), 1u << 20, &f) == GPUNVME_ERR_INVALID_ARGUMENT);
  CHECK(f == NULL);
  CHECK(message_has("wraps past"));
  /* ... and the variant that used to be accepted and later report a 0-byte hit. */
  CHECK(fetcher_with(q, ext(UINT64_MAX - (1ull << 55) + 1, (1ull << 55) + 8, 0, 512), 1u << 20, &f) ==
        GPUNVME_ERR_INVALID_ARGUMENT);
  CHECK(f == NULL);
  CHECK(message_has("wraps past"));
  CHECK(streamer_with(q, ext(10, UINT64_MAX - 4, 0, 512), &s) == GPUNVME_ERR_INVALID_ARGUMENT);
  CHECK(s == NULL);
  CHECK(message_has("wraps past"));

  /* Item 2: bytes that do not fit their blocks, for the streamer and the fetcher. */
  CHECK(streamer_with(q, ext(100, 1, 0, 1ull << 30), &s) == GPUNVME_ERR_INVALID_ARGUMENT);
  CHECK(s == NULL);
  CHECK(message_has("end past its last block"));
  CHECK(streamer_with(q, ext(100, 1, 512, 1), &s) == GPUNVME_ERR_INVALID_ARGUMENT);
  CHECK(message_has("not inside the first block"));
  CHECK(streamer_with(q, ext(100, 0, 0, 1), &s) == GPUNVME_ERR_INVALID_ARGUMENT);
  CHECK(message_has("end past its last block"));
  CHECK(fetcher_with(q, ext(100, 1, 0, 1ull << 30), 0, &f) == GPUNVME_ERR_INVALID_ARGUMENT);
  CHECK(f == NULL);
  CHECK(message_has("end past its last block"));
  CHECK(fetcher_with(q, ext(100, 1, 600, 8), 1u << 20, &f) == GPUNVME_ERR_INVALID_ARGUMENT);
  CHECK(message_has("not inside the first block"));

  /* The same shapes with valid extents work: the piece handed over fits its slot. */
  OK(streamer_with(q, ext(100, 2, 511, 513), &s));
  if (s) {
    gpunvme_slot_view_t v;
    uint64_t off = 0, len = 0;
    OK(gpunvme_streamer_begin(s, 0, 0));
    OK(gpunvme_streamer_wait(s, 0, &v));
    OK(gpunvme_streamer_piece(s, 0, 0, &off, &len));
    CHECK(len == 513);
    CHECK(off + len <= v.bytes);
    OK(gpunvme_streamer_release(s, 0));
    OK(gpunvme_streamer_destroy(s));
  }
  OK(fetcher_with(q, ext(100, 2, 7, 1000), 1u << 20, &f));
  if (f) {
    const uint32_t ids[1] = {0};
    uint32_t n = 0;
    gpunvme_fetched_expert_t e;
    OK(gpunvme_fetcher_fetch(f, 0, ids, 1, &n));
    CHECK(n == 1);
    OK(gpunvme_fetcher_wait_all(f));
    OK(gpunvme_fetcher_expert(f, 0, &e));
    CHECK(e.hit == 0);
    OK(gpunvme_fetcher_fetch(f, 0, ids, 1, &n));
    OK(gpunvme_fetcher_expert(f, 0, &e));
    CHECK(e.hit != 0); /* resident after its read succeeded */
    OK(gpunvme_fetcher_destroy(f));
  }

  OK(gpunvme_delete_io_queue(q));
  OK(gpunvme_ctrl_shutdown(ctrl));
  printf("%d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
