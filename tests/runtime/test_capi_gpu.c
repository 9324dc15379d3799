/* The C API's GPU path, compiled as C, on an emulated controller holding a generated MoE GGUF model
 * (written at the 1 MiB default through gpunvme_write, found again by gpunvme_model_open).
 *
 * Everywhere: without CUDA or without a GPU every GPU-path call fails with GPUNVME_ERR_UNSUPPORTED
 * and the reason gpunvme_gpu_available() gives; then the test exits 77 (meson: SKIP) when all those
 * checks passed.
 * With a GPU (CUDA builds: GPUNVME_TEST_CUDA): every layer streamed by GPU-issued reads
 * (begin_on on an I/O stream, wait_on / release_on on a compute stream) and compared on the host,
 * every byte of every tensor, with the file; then a second, host-free pass with sync(); experts
 * fetched with routing ids in device memory and every fetched part compared through the
 * scratchpad's host view, plus the device result structs read back through their C mirrors. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpunvme.h"

#ifdef GPUNVME_TEST_CUDA
#include <cuda_runtime_api.h>
#endif

#include "capi_check.h"

enum { LBA = 512, START_LBA = (1 << 20) / LBA, LAYERS = 6, EXPERTS = 8, NE0 = 300 };

/* ---- A qwen3moe GGUF (v3, F32, alignment 32) with a position-dependent data pattern ---- */

typedef struct {
  uint8_t* b;
  size_t n, cap;
} buf_t;

static void put(buf_t* w, const void* p, size_t n) {
  if (w->n + n > w->cap) {
    w->cap = (w->n + n) * 2;
    w->b = realloc(w->b, w->cap);
  }
  memcpy(w->b + w->n, p, n);
  w->n += n;
}
static void put32(buf_t* w, uint32_t v) { put(w, &v, 4); }
static void put64(buf_t* w, uint64_t v) { put(w, &v, 8); }
static void put_str(buf_t* w, const char* s) {
  put64(w, strlen(s));
  put(w, s, strlen(s));
}

typedef struct {
  char name[64];
  uint32_t n_dims;
  uint64_t ne[3];
  uint64_t rel;    /* offset in the data section */
  uint64_t bytes;
  uint64_t file_offset;
  int layer;       /* -1: not a layer's */
  int proj;        /* expert tensors: 0 gate, 1 up, 2 down; else -1 */
} tensor_t;

enum { MAX_TENSORS = 2 + LAYERS * 5 };
static tensor_t tensors[MAX_TENSORS];
static int n_tensors = 0;

static void add_tensor(const char* name, int layer, int proj, uint32_t n_dims, uint64_t a, uint64_t b, uint64_t c) {
  tensor_t* t = &tensors[n_tensors++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->n_dims = n_dims;
  t->ne[0] = a;
  t->ne[1] = b;
  t->ne[2] = c;
  t->bytes = 4;
  for (uint32_t d = 0; d < n_dims; ++d) t->bytes *= t->ne[d];
  t->layer = layer;
  t->proj = proj;
}

static uint8_t file_byte(uint64_t i) {
  uint64_t x = (i >> 3) * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return (uint8_t)(x >> ((i & 7) * 8));
}

/* Returns the file (zero padded to whole blocks); *size: its length before padding. */
static uint8_t* make_model(uint64_t* size, uint64_t* padded) {
  char name[64];
  add_tensor("token_embd.weight", -1, -1, 2, NE0, 2, 0);
  for (int l = 0; l < LAYERS; ++l) {
    snprintf(name, sizeof name, "blk.%d.attn_q.weight", l);
    add_tensor(name, l, -1, 2, NE0, 3, 0);
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
    add_tensor(name, l, -1, 2, NE0, EXPERTS, 0);
    snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", l);
    add_tensor(name, l, 0, 3, NE0, 5, EXPERTS);
    snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", l);
    add_tensor(name, l, 1, 3, NE0, 5, EXPERTS);
    snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", l);
    add_tensor(name, l, 2, 3, NE0 + 7, 3, EXPERTS);
  }
  buf_t w = {0};
  put32(&w, 0x46554747u);
  put32(&w, 3);
  put64(&w, (uint64_t)n_tensors);
  put64(&w, 3);
  put_str(&w, "general.architecture");
  put32(&w, 8);
  put_str(&w, "qwen3moe");
  put_str(&w, "general.name");
  put32(&w, 8);
  put_str(&w, "capi-gpu-moe");
  put_str(&w, "qwen3moe.expert_count");
  put32(&w, 4);
  put32(&w, EXPERTS);
  uint64_t off = 0;
  for (int i = 0; i < n_tensors; ++i) {
    tensor_t* t = &tensors[i];
    put_str(&w, t->name);
    put32(&w, t->n_dims);
    for (uint32_t d = 0; d < t->n_dims; ++d) put64(&w, t->ne[d]);
    put32(&w, 0); /* F32 */
    put64(&w, off);
    t->rel = off;
    off = (off + t->bytes + 31) / 32 * 32;
  }
  const uint64_t data = (w.n + 31) / 32 * 32;
  *size = data + off;
  *padded = (*size + LBA - 1) / LBA * LBA;
  uint8_t* f = calloc(*padded, 1);
  memcpy(f, w.b, w.n);
  free(w.b);
  for (uint64_t i = data; i < *size; ++i) f[i] = file_byte(i);
  for (int i = 0; i < n_tensors; ++i) tensors[i].file_offset = data + tensors[i].rel;
  return f;
}

static const tensor_t* expert_tensor(int layer, int proj) {
  for (int i = 0; i < n_tensors; ++i)
    if (tensors[i].layer == layer && tensors[i].proj == proj) return &tensors[i];
  return NULL;
}

/* Every tensor of `layer`, found in the held slot through gpunvme_streamer_locate, against the file.
 * Returns the tensors that differ (or could not be located). */
static int bad_tensors(gpunvme_streamer_t* s, uint32_t slot, const uint8_t* host, int layer, const uint8_t* file) {
  int bad = 0, seen = 0;
  for (int i = 0; i < n_tensors; ++i) {
    const tensor_t* t = &tensors[i];
    if (t->layer != layer) continue;
    ++seen;
    uint64_t at = 0;
    if (gpunvme_streamer_locate(s, slot, t->file_offset, &at) != GPUNVME_OK ||
        memcmp(host + at, file + t->file_offset, t->bytes) != 0)
      ++bad;
  }
  return seen == 5 ? bad : 100;
}

/* The fixture itself, on the CPU path: every layer through the CPU streamer, one expert fetch. */
static void cpu_baseline(gpunvme_streamer_t* s, gpunvme_fetcher_t* f, const uint8_t* file) {
  for (uint32_t l = 0; l < LAYERS; ++l) {
    gpunvme_slot_view_t v;
    OK(gpunvme_streamer_begin(s, l, l % 2));
    OK(gpunvme_streamer_wait(s, l % 2, &v));
    CHECK(bad_tensors(s, l % 2, v.host, (int)l, file) == 0);
    OK(gpunvme_streamer_release(s, l % 2));
  }
  const uint32_t ids[2] = {5, 2};
  uint32_t n = 0;
  OK(gpunvme_fetcher_fetch(f, 4, ids, 2, &n));
  CHECK(n == 2);
  OK(gpunvme_fetcher_wait_all(f));
  const void* sp = NULL;
  OK(gpunvme_fetcher_scratchpad(f, &sp, NULL, NULL));
  for (uint32_t i = 0; i < n; ++i) {
    gpunvme_fetched_expert_t fe;
    OK(gpunvme_fetcher_expert(f, i, &fe));
    CHECK(fe.expert == ids[i]);
    for (uint32_t k = 0; k < fe.n_parts; ++k) {
      gpunvme_projection_t proj;
      uint64_t off = 0, len = 0;
      OK(gpunvme_fetcher_part(f, i, k, &proj, &off, &len));
      const tensor_t* t = expert_tensor(4, (int)proj);
      CHECK(t != NULL && len == t->bytes / EXPERTS);
      if (t && len == t->bytes / EXPERTS)
        CHECK(memcmp((const uint8_t*)sp + off, file + t->file_offset + fe.expert * len, len) == 0);
    }
  }
}

/* Model-made handles (issue #18): an out-of-range enum and a model of another controller are
 * refused; locate answers on a held slot only. */
static void check_model_misuse(gpunvme_queue_t* q, gpunvme_model_t* model) {
  gpunvme_fetcher_t* f = (gpunvme_fetcher_t*)1;
  CHECK(gpunvme_fetcher_create_from_model(q, model, (gpunvme_expert_parts_t)7, NULL, &f) ==
        GPUNVME_ERR_INVALID_ARGUMENT);
  CHECK(f == NULL);
  CHECK(strstr(gpunvme_last_error_message(), "parts 7") != NULL);

  gpunvme_ctrl_t* other = NULL;
  gpunvme_queue_t* oq = NULL;
  OK(gpunvme_ctrl_init(&other, "emu:ram,size=1M"));
  OK(gpunvme_create_io_queue(other, 1, 16, &oq));
  gpunvme_streamer_t* s = (gpunvme_streamer_t*)1;
  CHECK(gpunvme_streamer_create_from_model(oq, model, 0, NULL, &s) == GPUNVME_ERR_INVALID_ARGUMENT);
  CHECK(s == NULL);
  CHECK(strstr(gpunvme_last_error_message(), "another controller") != NULL);
  CHECK(gpunvme_fetcher_create_from_model(oq, model, GPUNVME_EXPERTS_ALL, NULL, &f) == GPUNVME_ERR_INVALID_ARGUMENT);
  OK(gpunvme_delete_io_queue(oq));
  OK(gpunvme_ctrl_shutdown(other));

  OK(gpunvme_streamer_create_from_model(q, model, 0, NULL, &s));
  const tensor_t* t = NULL;
  for (int i = 0; i < n_tensors && !t; ++i)
    if (tensors[i].layer == 0) t = &tensors[i];
  uint64_t at = 0;
  OK(gpunvme_streamer_begin(s, 0, 0));
  CHECK(gpunvme_streamer_locate(s, 0, t->file_offset, &at) == GPUNVME_ERR_INVALID_ARGUMENT); /* loading */
  OK(gpunvme_streamer_wait(s, 0, NULL));
  OK(gpunvme_streamer_locate(s, 0, t->file_offset, &at));
  OK(gpunvme_streamer_release(s, 0));
  OK(gpunvme_streamer_destroy(s));
}

/* The GPU-path calls refused with the reason when there is no GPU (or no CUDA). */
static void check_unsupported(gpunvme_ctrl_t* ctrl, gpunvme_model_t* model, gpunvme_streamer_t* cpu_s,
                              gpunvme_fetcher_t* cpu_f, const char* why) {
#define UNSUPPORTED(call)                                                                      \
  do {                                                                                         \
    CHECK((call) == GPUNVME_ERR_UNSUPPORTED);                                                  \
    CHECK(strstr(gpunvme_last_error_message(), why) != NULL);                                  \
    CHECK(strstr(gpunvme_last_error_message(), "GPU path is unavailable") != NULL);            \
  } while (0)
  gpunvme_gpu_queues_t* gq = (gpunvme_gpu_queues_t*)1;
  UNSUPPORTED(gpunvme_gpu_queues_create(ctrl, 2, 2, 64, &gq));
  CHECK(gq == NULL);
  CHECK(strstr(gpunvme_last_error_message(), "gpunvme_gpu_queues_create") != NULL);
  gpunvme_streamer_t* s = (gpunvme_streamer_t*)1;
  gpunvme_extent_t ex;
  memset(&ex, 0, sizeof ex);
  const uint32_t first[2] = {0, 1};
  UNSUPPORTED(gpunvme_streamer_create_gpu(NULL, &ex, first, 1, NULL, &s));
  CHECK(s == NULL);
  s = (gpunvme_streamer_t*)1;
  UNSUPPORTED(gpunvme_streamer_create_gpu_from_model(NULL, model, 0, NULL, &s));
  CHECK(s == NULL);
  gpunvme_slot_view_t v;
  const uint32_t* st = NULL;
  UNSUPPORTED(gpunvme_streamer_begin_on(cpu_s, 0, 0, NULL));
  UNSUPPORTED(gpunvme_streamer_wait_on(cpu_s, 0, NULL, &v));
  UNSUPPORTED(gpunvme_streamer_status(cpu_s, 0, &st));
  UNSUPPORTED(gpunvme_streamer_release_on(cpu_s, 0, NULL));
  UNSUPPORTED(gpunvme_streamer_sync(cpu_s));
  gpunvme_fetcher_t* f = (gpunvme_fetcher_t*)1;
  UNSUPPORTED(gpunvme_fetcher_create_gpu_from_model(NULL, model, GPUNVME_EXPERTS_ALL, NULL, &f));
  CHECK(f == NULL);
  const uint32_t ids[1] = {0};
  UNSUPPORTED(gpunvme_fetcher_fetch_on(cpu_f, 0, ids, 1, NULL));
  uint32_t n = 99;
  UNSUPPORTED(gpunvme_fetcher_wait_gpu(cpu_f, &n));
  CHECK(n == 0);
  const gpunvme_gpu_fetch_result_t* r = NULL;
  UNSUPPORTED(gpunvme_fetcher_device_result(cpu_f, &r, NULL, NULL));
  UNSUPPORTED(gpunvme_gpu_available());
  CHECK(gpunvme_gpu_queues_destroy(NULL) == GPUNVME_OK);
#undef UNSUPPORTED
}

#ifdef GPUNVME_TEST_CUDA
#define CUDA_OK(call) CHECK((call) == cudaSuccess)

static uint32_t read_state(const uint32_t* device_word) {
  uint32_t v = 0xFFFFFFFFu;
  CUDA_OK(cudaMemcpy(&v, device_word, sizeof v, cudaMemcpyDeviceToHost));
  return v;
}

static void gpu_streamer(gpunvme_ctrl_t* ctrl, gpunvme_model_t* model, const uint8_t* file) {
  gpunvme_gpu_queues_t* gq = NULL;
  CHECK(gpunvme_gpu_queues_create(ctrl, 2, 64, 64, &gq) == GPUNVME_ERR_INVALID_ARGUMENT); /* past the granted qids */
  CHECK(gpunvme_gpu_queues_create(ctrl, 2, 0, 64, &gq) == GPUNVME_ERR_INVALID_ARGUMENT);
  OK(gpunvme_gpu_queues_create(ctrl, 2, 2, 64, &gq));
  if (!gq) return;
  gpunvme_streamer_t* s = NULL;
  gpunvme_streamer_opts_t so;
  memset(&so, 0, sizeof so);
  so.slots = 2;
  OK(gpunvme_streamer_create_gpu_from_model(gq, model, 0, &so, &s));
  if (!s) {
    OK(gpunvme_gpu_queues_destroy(gq));
    return;
  }
  cudaStream_t io = NULL, compute = NULL;
  CUDA_OK(cudaStreamCreateWithFlags(&io, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));

  /* Pass 1: double-buffered on the GPU; the host checks each layer once `compute` passed its wait. */
  OK(gpunvme_streamer_begin_on(s, 0, 0, io));
  for (uint32_t l = 0; l < LAYERS; ++l) {
    const uint32_t slot = l % 2;
    if (l + 1 < LAYERS) OK(gpunvme_streamer_begin_on(s, l + 1, (l + 1) % 2, io));
    gpunvme_slot_view_t v;
    memset(&v, 0, sizeof v);
    OK(gpunvme_streamer_wait_on(s, slot, compute, &v));
    CHECK(v.layer == l);
    CHECK(v.device != NULL);
    CHECK(v.host != NULL);
    CHECK(v.n_pieces >= 1);
    const uint32_t* st = NULL;
    OK(gpunvme_streamer_status(s, slot, &st));
    CHECK(st != NULL);
    CUDA_OK(cudaStreamSynchronize(compute));
    if (st) CHECK(read_state(st) == 1);
    CHECK(bad_tensors(s, slot, v.host, (int)l, file) == 0);
    if (l == 0) {
      /* Misuse: a held slot is not begun again, a GPU-ordered hold is released on a stream. */
      CHECK(gpunvme_streamer_begin_on(s, 3, slot, io) == GPUNVME_ERR_INVALID_ARGUMENT);
      CHECK(gpunvme_streamer_release(s, slot) == GPUNVME_ERR_INVALID_ARGUMENT);
      CHECK(strstr(gpunvme_last_error_message(), "stream") != NULL);
    }
    OK(gpunvme_streamer_release_on(s, slot, compute));
    st = (const uint32_t*)1;
    OK(gpunvme_streamer_status(s, slot, &st));
    CHECK(st == NULL);
  }
  OK(gpunvme_streamer_sync(s));
  gpunvme_stream_stats_t stats;
  OK(gpunvme_streamer_stats(s, &stats));
  CHECK(stats.layers == LAYERS);
  CHECK(stats.bytes > 0);
  CHECK(gpunvme_streamer_wait_on(s, 0, compute, NULL) == GPUNVME_ERR_INVALID_ARGUMENT); /* nothing begun */
  const uint32_t* none = NULL;
  CHECK(gpunvme_streamer_status(s, 2, &none) == GPUNVME_ERR_INVALID_ARGUMENT); /* 2 slots */

  /* Pass 2, as an engine runs it: no host wait per layer, each layer in the other slot than in
   * pass 1; the last layer stays held through sync() and is checked on the host. */
  OK(gpunvme_streamer_begin_on(s, 0, 1, io));
  gpunvme_slot_view_t last;
  memset(&last, 0, sizeof last);
  for (uint32_t l = 0; l < LAYERS; ++l) {
    const uint32_t slot = (l + 1) % 2;
    if (l + 1 < LAYERS) OK(gpunvme_streamer_begin_on(s, l + 1, (l + 2) % 2, io));
    gpunvme_slot_view_t v;
    OK(gpunvme_streamer_wait_on(s, slot, compute, &v));
    if (l + 1 < LAYERS)
      OK(gpunvme_streamer_release_on(s, slot, compute));
    else
      last = v;
  }
  OK(gpunvme_streamer_sync(s));
  CUDA_OK(cudaStreamSynchronize(compute));
  {
    const uint32_t slot = LAYERS % 2;
    const uint32_t* st = NULL;
    OK(gpunvme_streamer_status(s, slot, &st));
    if (st) CHECK(read_state(st) == 1);
    CHECK(last.layer == LAYERS - 1);
    if (last.host) CHECK(bad_tensors(s, slot, last.host, LAYERS - 1, file) == 0);
    OK(gpunvme_streamer_release_on(s, slot, compute));
  }
  OK(gpunvme_streamer_stats(s, &stats));
  CHECK(stats.layers == 2 * LAYERS);

  /* A slot released on a stream is begun on a stream again (the host begin would not wait for
   * the compute stream's release). */
  CHECK(gpunvme_streamer_begin(s, 2, 0) == GPUNVME_ERR_INVALID_ARGUMENT);
  CHECK(strstr(gpunvme_last_error_message(), "stream") != NULL);

  CHECK(gpunvme_gpu_queues_destroy(gq) == GPUNVME_ERR_INVALID_ARGUMENT); /* the streamer uses it */
  OK(gpunvme_streamer_destroy(s));
  /* A second streamer on the same queues after the first was destroyed: the host calls (reads
   * on the GPU queues' internal stream) into slot 0, then GPU-ordered into slot 1. */
  OK(gpunvme_streamer_create_gpu_from_model(gq, model, 0, &so, &s));
  if (s) {
    gpunvme_slot_view_t v;
    OK(gpunvme_streamer_begin(s, 2, 0));
    OK(gpunvme_streamer_wait(s, 0, &v));
    CHECK(v.layer == 2);
    if (v.host) CHECK(bad_tensors(s, 0, v.host, 2, file) == 0);
    OK(gpunvme_streamer_release(s, 0));
    OK(gpunvme_streamer_begin_on(s, LAYERS - 2, 1, io));
    OK(gpunvme_streamer_wait_on(s, 1, compute, &v));
    OK(gpunvme_streamer_sync(s));
    CUDA_OK(cudaStreamSynchronize(compute));
    CHECK(v.layer == LAYERS - 2);
    if (v.host) CHECK(bad_tensors(s, 1, v.host, LAYERS - 2, file) == 0);
    OK(gpunvme_streamer_release_on(s, 1, compute));
    CUDA_OK(cudaStreamSynchronize(compute));
    OK(gpunvme_streamer_destroy(s));
  }
  CUDA_OK(cudaStreamDestroy(io));
  CUDA_OK(cudaStreamDestroy(compute));
  /* Shutdown is refused while GPU queues are open (checked by the caller after the CPU queue went). */
  OK(gpunvme_gpu_queues_destroy(gq));
}

/* Distinct ids in first-seen order. */
static uint32_t distinct(const uint32_t* ids, uint32_t n, uint32_t* out) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t j = 0;
    while (j < k && out[j] != ids[i]) ++j;
    if (j == k) out[k++] = ids[i];
  }
  return k;
}

static void gpu_fetcher(gpunvme_ctrl_t* ctrl, gpunvme_model_t* model, const uint8_t* file, int cached,
                        gpunvme_gpu_queues_t* gq) {
  enum { IDS = 4, TOKENS = 12 };
  gpunvme_fetcher_t* f = NULL;
  gpunvme_fetcher_opts_t fo;
  memset(&fo, 0, sizeof fo);
  fo.max_experts_per_fetch = IDS;
  fo.cache_bytes = cached ? (4u << 20) : 0;
  fo.nsid = 2;
  CHECK(gpunvme_fetcher_create_gpu_from_model(gq, model, GPUNVME_EXPERTS_ALL, &fo, &f) ==
        GPUNVME_ERR_INVALID_ARGUMENT); /* the GPU queues read namespace 1 */
  fo.nsid = 0;
  OK(gpunvme_fetcher_create_gpu_from_model(gq, model, GPUNVME_EXPERTS_ALL, &fo, &f));
  if (!f) return;
  const gpunvme_gpu_fetch_result_t* dres = NULL;
  const gpunvme_gpu_fetched_expert_t* dexp = NULL;
  const uint32_t* dsel = NULL;
  OK(gpunvme_fetcher_device_result(f, &dres, &dexp, &dsel));
  CHECK(dres != NULL && dexp != NULL && dsel != NULL);
  CHECK((const void*)dexp == (const void*)((const uint8_t*)dres + sizeof(gpunvme_gpu_fetch_result_t)));
  const void* sp = NULL;
  const void* sp_dev = NULL;
  uint64_t sp_bytes = 0;
  OK(gpunvme_fetcher_scratchpad(f, &sp, &sp_dev, &sp_bytes));
  CHECK(sp != NULL && sp_dev != NULL && sp_bytes > 0);

  cudaStream_t fs = NULL;
  CUDA_OK(cudaStreamCreateWithFlags(&fs, cudaStreamNonBlocking));
  uint32_t* d_ids = NULL;
  CUDA_OK(cudaMalloc((void**)&d_ids, IDS * sizeof(uint32_t)));
  uint64_t requested = 0;
  for (uint32_t t = 0; t < TOKENS; ++t) {
    const uint32_t layer = t % 3;
    const uint32_t ids[IDS] = {(t * 3) % EXPERTS, (t * 5 + 1) % EXPERTS, (t * 3) % EXPERTS, (t + 2) % 4};
    uint32_t want[IDS];
    const uint32_t nd = distinct(ids, IDS, want);
    requested += nd;
    CUDA_OK(cudaMemcpyAsync(d_ids, ids, sizeof ids, cudaMemcpyHostToDevice, fs));
    OK(gpunvme_fetcher_fetch_on(f, layer, d_ids, IDS, fs));
    if (t == 0) {
      gpunvme_fetched_expert_t fe;
      CHECK(gpunvme_fetcher_expert(f, 0, &fe) == GPUNVME_ERR_INVALID_ARGUMENT); /* not waited for */
      CHECK(strstr(gpunvme_last_error_message(), "wait_gpu") != NULL);
    }
    uint32_t n = 0;
    OK(gpunvme_fetcher_wait_gpu(f, &n));
    CHECK(n == nd);
    gpunvme_gpu_fetch_result_t hr;
    gpunvme_gpu_fetched_expert_t hx[IDS];
    uint32_t hsel[IDS];
    memset(&hr, 0, sizeof hr);
    memset(hx, 0, sizeof hx);
    CUDA_OK(cudaMemcpy(&hr, dres, sizeof hr, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hx, dexp, sizeof hx, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(hsel, dsel, sizeof hsel, cudaMemcpyDeviceToHost));
    CHECK(hr.count == nd);
    CHECK(hr.error == GPUNVME_FETCH_ERROR_NONE);
    CHECK(hr.layer == layer);
    CHECK(hr.token == t + 1);
    for (uint32_t j = 0; j < IDS; ++j) CHECK(hsel[j] < nd && want[hsel[j]] == ids[j]);
    for (uint32_t i = 0; i < n && i < IDS; ++i) {
      gpunvme_fetched_expert_t fe;
      OK(gpunvme_fetcher_expert(f, i, &fe));
      CHECK(fe.expert == want[i]);
      CHECK(fe.n_parts == 3);
      CHECK(hx[i].expert == fe.expert);
      CHECK(hx[i].hit == fe.hit);
      CHECK(hx[i].offset == fe.offset);
      CHECK(hx[i].ready == hr.token);
      CHECK(hx[i].failed == 0);
      CHECK(hx[i].part_count == fe.n_parts);
      int seen[3] = {0, 0, 0};
      for (uint32_t k = 0; k < fe.n_parts && k < GPUNVME_MAX_EXPERT_PARTS; ++k) {
        gpunvme_projection_t proj;
        uint64_t off = 0, len = 0;
        OK(gpunvme_fetcher_part(f, i, k, &proj, &off, &len));
        CHECK(hx[i].part_proj[k] == (uint32_t)proj);
        CHECK(hx[i].part_offset[k] == off);
        CHECK(hx[i].part_bytes[k] == len);
        if ((int)proj < 0 || (int)proj > 2) {
          CHECK(0 && "projection");
          continue;
        }
        seen[proj] = 1;
        const tensor_t* tt = expert_tensor((int)layer, (int)proj);
        const uint64_t slice = tt ? tt->bytes / EXPERTS : 0;
        CHECK(tt != NULL && len == slice);
        CHECK(off + len <= sp_bytes);
        if (tt && len == slice && off + len <= sp_bytes)
          CHECK(memcmp((const uint8_t*)sp + off, file + tt->file_offset + fe.expert * slice, slice) == 0);
      }
      CHECK(seen[0] && seen[1] && seen[2]);
    }
  }
  gpunvme_fetch_metrics_t m;
  OK(gpunvme_fetcher_metrics(f, &m));
  CHECK(m.tokens == TOKENS);
  CHECK(m.requested == requested);
  CHECK(m.faults + m.hits == requested);
  if (cached) {
    CHECK(m.cache_capacity > 0);
    CHECK(m.hits > 0);
    uint32_t res[LAYERS];
    OK(gpunvme_fetcher_resident(f, res, LAYERS));
    uint32_t sum = 0;
    for (int l = 0; l < LAYERS; ++l) sum += res[l];
    CHECK(sum > 0 && sum <= m.cache_capacity);
    CHECK(res[3] == 0); /* layers 3.. were never fetched */
  } else {
    CHECK(m.cache_capacity == 0);
    CHECK(m.hits == 0);
  }

  /* A bad routing id is refused on the GPU and reported by wait_gpu; the next fetch works. */
  const uint32_t bad[1] = {EXPERTS + 3};
  CUDA_OK(cudaMemcpyAsync(d_ids, bad, sizeof bad, cudaMemcpyHostToDevice, fs));
  OK(gpunvme_fetcher_fetch_on(f, 0, d_ids, 1, fs));
  uint32_t n = 99;
  CHECK(gpunvme_fetcher_wait_gpu(f, &n) == GPUNVME_ERR_INVALID_ARGUMENT);
  CHECK(n == 0);
  CHECK(strstr(gpunvme_last_error_message(), "routing id") != NULL);
  const uint32_t good[2] = {1, 1};
  CUDA_OK(cudaMemcpyAsync(d_ids, good, sizeof good, cudaMemcpyHostToDevice, fs));
  OK(gpunvme_fetcher_fetch_on(f, 1, d_ids, 2, fs));
  OK(gpunvme_fetcher_wait_gpu(f, &n));
  CHECK(n == 1);
  CHECK(gpunvme_fetcher_fetch_on(f, LAYERS, d_ids, 1, fs) == GPUNVME_ERR_INVALID_ARGUMENT); /* no such layer */

  /* The host-path calls are refused on a GPU fetcher. */
  CHECK(gpunvme_fetcher_fetch(f, 0, good, 1, &n) == GPUNVME_ERR_UNSUPPORTED);
  CHECK(strstr(gpunvme_last_error_message(), "fetch_on") != NULL);
  CHECK(gpunvme_fetcher_wait_all(f) == GPUNVME_ERR_UNSUPPORTED);
  int ready = 0;
  CHECK(gpunvme_fetcher_ready(f, 0, &ready) == GPUNVME_ERR_UNSUPPORTED);

  CHECK(gpunvme_gpu_queues_destroy(gq) == GPUNVME_ERR_INVALID_ARGUMENT); /* the fetcher uses it */
  OK(gpunvme_fetcher_destroy(f));
  CUDA_OK(cudaFree(d_ids));
  CUDA_OK(cudaStreamDestroy(fs));
  (void)ctrl;
}
#endif /* GPUNVME_TEST_CUDA */

int main(void) {
  gpunvme_ctrl_t* ctrl = NULL;
  gpunvme_queue_t* q = NULL;
  OK(gpunvme_ctrl_init(&ctrl, "emu:ram,size=16M,lba=512,threads=2"));
  if (!ctrl) return 1;
  OK(gpunvme_create_io_queue(ctrl, 1, 64, &q));

  uint64_t size = 0, padded = 0;
  uint8_t* file = make_model(&size, &padded);
  OK(gpunvme_write(q, 1, START_LBA, padded / LBA, file));
  gpunvme_model_t* model = NULL;
  OK(gpunvme_model_open(q, 1, -1, &model));
  uint64_t start = 0;
  uint32_t n_layers = 0, n_experts = 0;
  OK(gpunvme_model_start_lba(model, &start));
  OK(gpunvme_model_layer_count(model, &n_layers));
  OK(gpunvme_model_expert_count(model, &n_experts));
  CHECK(start == START_LBA);
  CHECK(n_layers == LAYERS);
  CHECK(n_experts == EXPERTS);
  for (int i = 0; i < n_tensors; ++i) {
    uint64_t off = 0;
    gpunvme_extent_t e;
    OK(gpunvme_model_tensor(model, tensors[i].name, &e, &off));
    CHECK(off == tensors[i].file_offset);
    CHECK(e.byte_length == tensors[i].bytes);
  }

  /* CPU-path handles: the GPU-ordered calls on them are refused either way. */
  gpunvme_streamer_t* cpu_s = NULL;
  gpunvme_fetcher_t* cpu_f = NULL;
  check_model_misuse(q, model);
  OK(gpunvme_streamer_create_from_model(q, model, 0, NULL, &cpu_s));
  OK(gpunvme_fetcher_create_from_model(q, model, GPUNVME_EXPERTS_ALL, NULL, &cpu_f));
  if (cpu_s && cpu_f) cpu_baseline(cpu_s, cpu_f, file);

  const gpunvme_err_t avail = gpunvme_gpu_available();
  char why[512];
  snprintf(why, sizeof why, "%s", gpunvme_last_error_message());
  int skipped = 0;
  if (avail != GPUNVME_OK) {
    CHECK(avail == GPUNVME_ERR_UNSUPPORTED);
    /* The reason, less the "gpunvme_gpu_available: the GPU path is unavailable: " prefix. */
    const char* reason = strstr(why, "unavailable: ");
    reason = reason ? reason + strlen("unavailable: ") : why;
    CHECK(strlen(reason) > 0);
#ifndef GPUNVME_TEST_CUDA
    CHECK(strstr(reason, "without CUDA") != NULL);
#endif
    check_unsupported(ctrl, model, cpu_s, cpu_f, reason);
    printf("GPU path unavailable (%s): checked that every GPU call refuses with that reason\n", reason);
    skipped = 1;
  } else {
    CHECK(strlen(why) == 0);
    /* CPU handles: the GPU-ordered calls name what is missing. */
    CHECK(gpunvme_streamer_begin_on(cpu_s, 0, 0, NULL) == GPUNVME_ERR_UNSUPPORTED);
    CHECK(strstr(gpunvme_last_error_message(), "GPU submitter") != NULL);
    const uint32_t ids[1] = {0};
    CHECK(gpunvme_fetcher_fetch_on(cpu_f, 0, ids, 1, NULL) == GPUNVME_ERR_UNSUPPORTED);
    CHECK(gpunvme_fetcher_wait_gpu(cpu_f, NULL) == GPUNVME_ERR_UNSUPPORTED);
  }
  OK(gpunvme_streamer_destroy(cpu_s));
  OK(gpunvme_fetcher_destroy(cpu_f));

#ifdef GPUNVME_TEST_CUDA
  if (!skipped) {
    gpu_streamer(ctrl, model, file);
    gpunvme_gpu_queues_t* gq = NULL;
    OK(gpunvme_gpu_queues_create(ctrl, 4, 2, 64, &gq));
    if (gq) {
      gpu_fetcher(ctrl, model, file, 0, gq);
      gpu_fetcher(ctrl, model, file, 1, gq);
      OK(gpunvme_model_close(model));
      model = NULL;
      OK(gpunvme_delete_io_queue(q));
      q = NULL;
      CHECK(gpunvme_ctrl_shutdown(ctrl) == GPUNVME_ERR_INVALID_ARGUMENT); /* the GPU queues are open */
      CHECK(strstr(gpunvme_last_error_message(), "gpunvme_gpu_queues_destroy") != NULL);
      OK(gpunvme_gpu_queues_destroy(gq));
    }
  }
#endif

  OK(gpunvme_model_close(model));
  OK(gpunvme_delete_io_queue(q));
  OK(gpunvme_ctrl_shutdown(ctrl));
  free(file);
  printf("%d checks, %d failed%s\n", checks, failures, skipped && failures == 0 ? " (GPU parts skipped: exit 77)" : "");
  if (failures) return 1;
  return skipped ? 77 : 0;
}
