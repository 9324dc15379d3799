/* gpunvme C API: a thin, exception-free layer over the C++ library (host/, runtime/plan,
 * runtime/stream). Every call returns a gpunvme_err_t; on failure gpunvme_last_error_message()
 * (per thread) says what went wrong and, where there is one, the fix.
 *
 * Rules every call follows (misuse is refused before anything happens; nothing is half done):
 *  - It clears the calling thread's message first; a failure sets it (what, and the fix).
 *  - A handle argument that is NULL is refused with GPUNVME_ERR_INVALID_ARGUMENT ("argument 's'
 *    is NULL"), except by the destroy/close/shutdown calls, for which NULL is a no-op (GPUNVME_OK).
 *    A handle already destroyed is refused the same way ("not a live gpunvme_..._t") as long as its
 *    memory still reads back (a tag cleared on destroy: detection is best effort, not a promise).
 *  - Calls that make a handle set *out to NULL first, so *out is NULL after every failure.
 *  - Out-of-range ids, indices, enums and block ranges: GPUNVME_ERR_INVALID_ARGUMENT, message names
 *    the value and the valid range. Host memory exhausted: GPUNVME_ERR_RESOURCE.
 *  - Threads: a queue, streamer, fetcher or GPU queue set is used by one thread at a time. A call
 *    on one that another thread is inside of is refused (GPUNVME_ERR_INVALID_ARGUMENT, "another
 *    thread is inside a gpunvme call on this ..."), never interleaved. Different handles may be
 *    used from different threads, also when they share a queue or a controller (streamers on one
 *    queue share its thread-safe submitter; a controller serializes admin commands, so threads may
 *    create and delete queues on it at once). A model is read-only once open: its queries may run
 *    on several threads; gpunvme_model_close must not race them.
 *
 * Lifetimes: destroy streamers and fetchers before the queue (or GPU queues) they use, queues and
 * models before their controller (refused otherwise: GPUNVME_ERR_INVALID_ARGUMENT, nothing freed).
 *
 *   gpunvme_ctrl_t* c;  gpunvme_queue_t* q;
 *   gpunvme_ctrl_init(&c, "emu:ram,size=256M");
 *   gpunvme_create_io_queue(c, 1, 256, &q);
 *   ... streamer / fetcher ...
 *   gpunvme_delete_io_queue(q);
 *   gpunvme_ctrl_shutdown(c);
 *
 * GPU path (CUDA builds, a GPU present; see "GPU path" below): GPU kernels issue the reads on a
 * CUDA stream and the consumer's stream waits for them, with no host round trip:
 *
 *   gpunvme_gpu_queues_t* gq;  gpunvme_streamer_t* s;  gpunvme_slot_view_t v;  const uint32_t* st;
 *   gpunvme_gpu_queues_create(c, 2, 4, 256, &gq);              // qids 2..5, driven by GPU warps
 *   gpunvme_streamer_create_gpu_from_model(gq, model, 0, NULL, &s);
 *   gpunvme_streamer_begin_on(s, 0, 0, io);
 *   for (l = 0; l < L; ++l) {
 *     if (l + 1 < L) gpunvme_streamer_begin_on(s, l + 1, (l + 1) % 2, io);
 *     gpunvme_streamer_wait_on(s, l % 2, compute, &v);         // returns at once
 *     gpunvme_streamer_status(s, l % 2, &st);
 *     layer_kernel<<<g, b, 0, compute>>>(v.device, st);        // st: 1 = every read succeeded
 *     gpunvme_streamer_release_on(s, l % 2, compute);
 *   }
 *   gpunvme_streamer_sync(s);                                  // errors, stats
 *   ... gpunvme_streamer_destroy(s); gpunvme_gpu_queues_destroy(gq);
 *
 * Without CUDA or without a GPU every GPU-path call returns GPUNVME_ERR_UNSUPPORTED and the
 * last-error message gives the reason (gpunvme_gpu_available() asks up front).
 *
 * Build: pkg-config --cflags --libs gpunvme (the GPU path also needs -lcudart in the application
 * for its own streams and kernels)
 */
#ifndef GPUNVME_H
#define GPUNVME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUNVME_API_VERSION 2 /* 2: the GPU path */

typedef enum gpunvme_err {
  GPUNVME_OK = 0,
  GPUNVME_ERR_INVALID_ARGUMENT = 1, /* bad device string, option, index or size */
  GPUNVME_ERR_NOT_FOUND = 2,        /* device, file, namespace, tensor missing */
  GPUNVME_ERR_PERMISSION = 3,       /* not root, /dev/vfio not accessible */
  GPUNVME_ERR_RESOURCE = 4,         /* memory, hugepages, queue slots exhausted */
  GPUNVME_ERR_TIMEOUT = 5,          /* a bounded wait expired */
  GPUNVME_ERR_CONTROLLER_FATAL = 6, /* CSTS.CFS, or the device disappeared */
  GPUNVME_ERR_COMMAND_FAILED = 7,   /* a command completed with an error status */
  GPUNVME_ERR_PROTOCOL = 8,         /* the controller broke a protocol rule */
  GPUNVME_ERR_UNSUPPORTED = 9,      /* the platform or device lacks a feature */
  GPUNVME_ERR_IO = 10,              /* a host file or system call failed */
  GPUNVME_ERR_MODEL = 11,           /* no model on the device, or a bad GGUF header */
  GPUNVME_ERR_INTERNAL = 12         /* anything else (a bug: please report the message) */
} gpunvme_err_t;

/* Static text for a code ("invalid argument", ...); "unknown error code" for any other value. Never
 * NULL, never fails; any thread. */
const char* gpunvme_strerror(gpunvme_err_t err);
/* The calling thread's last error message ("" when the last call succeeded). Valid until the
 * thread's next gpunvme call. Never NULL; any thread. */
const char* gpunvme_last_error_message(void);

typedef struct gpunvme_ctrl gpunvme_ctrl_t;
typedef struct gpunvme_queue gpunvme_queue_t;
typedef struct gpunvme_model gpunvme_model_t;
typedef struct gpunvme_streamer gpunvme_streamer_t;
typedef struct gpunvme_fetcher gpunvme_fetcher_t;

/* ---- Controller and queues ---- */

/* device: "emu:ram,size=256M", "emu:/path/disk.img", "vfio:0000:0b:00.0" (see README).
 * *out = NULL first. out or device NULL, a malformed string: INVALID_ARGUMENT; no such device:
 * NOT_FOUND; no access: PERMISSION; memory for an emulated namespace: RESOURCE. Any thread. */
gpunvme_err_t gpunvme_ctrl_init(gpunvme_ctrl_t** out, const char* device);
/* Orderly shutdown and free; NULL is a no-op. Refused (INVALID_ARGUMENT, nothing freed) while I/O
 * queues or GPU queue sets of it are open. The handle is freed even when the shutdown itself fails
 * (TIMEOUT). No other call on ctrl, or on its queues, may run meanwhile. */
gpunvme_err_t gpunvme_ctrl_shutdown(gpunvme_ctrl_t* ctrl);

typedef struct gpunvme_ctrl_info {
  uint32_t io_queues;          /* I/O queue pairs granted (qids 1..io_queues) */
  uint32_t max_queue_entries;  /* CAP.MQES + 1 */
  uint64_t page_bytes;         /* CC.MPS */
  uint64_t max_transfer_bytes; /* MDTS; 0 = unlimited */
  uint32_t namespaces;
  uint32_t reserved;
} gpunvme_ctrl_info_t;
/* Identify data. ctrl or out NULL: INVALID_ARGUMENT. Any thread, concurrently with other calls on ctrl. */
gpunvme_err_t gpunvme_ctrl_info(gpunvme_ctrl_t* ctrl, gpunvme_ctrl_info_t* out);
/* A namespace's size; blocks / lba_bytes may be NULL. nsid not active: NOT_FOUND. Any thread. */
gpunvme_err_t gpunvme_ns_info(gpunvme_ctrl_t* ctrl, uint32_t nsid, uint64_t* blocks, uint32_t* lba_bytes);

/* I/O queue pair qid (1..ctrl_info.io_queues), entries 2..max_queue_entries deep. *out = NULL first.
 * qid or entries out of range: INVALID_ARGUMENT; qid already in use: COMMAND_FAILED (the
 * controller's status). Several threads may create and delete queues on one controller at once. */
gpunvme_err_t gpunvme_create_io_queue(gpunvme_ctrl_t* ctrl, uint16_t qid, uint32_t entries, gpunvme_queue_t** out);
/* Deletes the queue pair and frees the handle; NULL is a no-op. Refused (INVALID_ARGUMENT, nothing
 * freed) while streamers/fetchers use the queue. The handle is freed even when the controller
 * refuses the deletion (COMMAND_FAILED). One thread at a time per queue. */
gpunvme_err_t gpunvme_delete_io_queue(gpunvme_queue_t* queue);

/* Synchronous whole-block transfers through a bounce buffer (set-up, deployment, checks):
 * nblocks * lba_bytes bytes from/to host memory (the caller's buffer must hold them).
 * The whole request is checked before the first command, so a refused transfer changes neither
 * the namespace nor the buffer: nsid not active: NOT_FOUND; blocks [slba, slba + nblocks) not all
 * inside the namespace (overflow included), a buffer wrapping the address space, src/dst NULL:
 * INVALID_ARGUMENT. Also refused while streamers/fetchers use the queue (their reads may be issued
 * at any moment, from any thread): use another queue, or destroy them (the queue is the caller's
 * again once its last streamer/fetcher is gone, or after a create that failed). A failure of the device mid-way (COMMAND_FAILED, TIMEOUT) can leave
 * part of a write done. One thread at a time per queue: another thread's call is refused. */
gpunvme_err_t gpunvme_write(gpunvme_queue_t* queue, uint32_t nsid, uint64_t slba, uint64_t nblocks, const void* src);
gpunvme_err_t gpunvme_read(gpunvme_queue_t* queue, uint32_t nsid, uint64_t slba, uint64_t nblocks, void* dst);

/* ---- Extents: bytes as whole blocks ---- */

typedef struct gpunvme_extent {
  uint64_t first_lba;
  uint64_t lba_count;
  uint64_t byte_length;    /* the bytes wanted */
  uint32_t byte_in_first;  /* where they start in the first block */
  uint32_t reserved;
} gpunvme_extent_t;

/* ---- A GGUF model on a namespace (deploy record, raw dd at LBA 0, or at a start LBA) ---- */

/* start_lba_hint < 0: detect (record at LBA 0, GGUF at LBA 0, then the 1 MiB default). nsid 0: 1.
 * *out = NULL first. Reads through `queue` (refused as gpunvme_read is: another thread on the queue,
 * or a streamer/fetcher driving it); no model found, a bad GGUF header: MODEL; nsid not active:
 * NOT_FOUND. The model remembers its controller: streamers/fetchers on another one refuse it. */
gpunvme_err_t gpunvme_model_open(gpunvme_queue_t* queue, uint32_t nsid, int64_t start_lba_hint, gpunvme_model_t** out);
/* Frees the model; NULL is a no-op. Streamers/fetchers made from it keep working (they copied what
 * they need). Must not race other calls on the model. */
gpunvme_err_t gpunvme_model_close(gpunvme_model_t* model);
/* The queries below: model or the out pointer NULL: INVALID_ARGUMENT. Read-only: any thread,
 * concurrently. Layers are numbered 0..count-1 (blk.N). */
gpunvme_err_t gpunvme_model_layer_count(gpunvme_model_t* model, uint32_t* count);
gpunvme_err_t gpunvme_model_expert_count(gpunvme_model_t* model, uint32_t* count);
/* A tensor's extent and its absolute byte offset in the GGUF file (either out may be NULL). name
 * NULL: INVALID_ARGUMENT; no such tensor: NOT_FOUND. */
gpunvme_err_t gpunvme_model_tensor(gpunvme_model_t* model, const char* name, gpunvme_extent_t* extent,
                                   uint64_t* file_offset);
gpunvme_err_t gpunvme_model_start_lba(gpunvme_model_t* model, uint64_t* start_lba);

/* ---- Layer streamer ---- */

typedef struct gpunvme_streamer_opts {
  uint32_t slots;             /* 0: 2 */
  uint32_t nsid;              /* 0: 1 */
  uint32_t max_command_bytes; /* 0: MDTS alone */
  int pump_thread;            /* nonzero: a host thread keeps the queue fed while the caller computes.
                               All streamers/fetchers on one queue share it: a different choice
                               than the queue's current users' is refused (INVALID_ARGUMENT). */
} gpunvme_streamer_opts_t;

/* Layer i reads extents[layer_first[i] .. layer_first[i+1]); layer_first has n_layers + 1 entries.
 * Slots, PRP tables and every (layer, slot) command plan are built here, once. opts may be NULL.
 * *out = NULL first. NULL arrays, layer_first not ascending, bad options (nsid not active:
 * NOT_FOUND), a pump_thread choice unlike the queue's other users': INVALID_ARGUMENT; slot memory:
 * RESOURCE. A failed create leaves the queue as it was. May run on several threads at once for
 * one queue (each makes its own streamer). */
gpunvme_err_t gpunvme_streamer_create(gpunvme_queue_t* queue, const gpunvme_extent_t* extents, const uint32_t* layer_first,
                                      uint32_t n_layers, const gpunvme_streamer_opts_t* opts, gpunvme_streamer_t** out);
/* Every blk.N layer of a model; skip_experts nonzero leaves MoE expert tensors to the fetcher.
 * As gpunvme_streamer_create; a model opened on another controller: INVALID_ARGUMENT. */
gpunvme_err_t gpunvme_streamer_create_from_model(gpunvme_queue_t* queue, gpunvme_model_t* model, int skip_experts,
                                                 const gpunvme_streamer_opts_t* opts, gpunvme_streamer_t** out);
/* Waits (bounded) for reads still landing in its slots, frees it; NULL is a no-op. The last
 * streamer/fetcher on a queue hands the queue back (its pump thread ends). */
gpunvme_err_t gpunvme_streamer_destroy(gpunvme_streamer_t* s);

/* Slot life cycle: free -> begin -> loading -> wait -> held -> release -> free. A call out of
 * order is refused (INVALID_ARGUMENT) and changes no slot; slot >= slots or layer >= n_layers:
 * INVALID_ARGUMENT. Every call on a streamer: one thread at a time (another's is refused).
 * begin: the slot must be free; returns once the reads are issued. */
gpunvme_err_t gpunvme_streamer_begin(gpunvme_streamer_t* s, uint32_t layer, uint32_t slot);
/* Non-blocking: *ready = 1 once a loading slot's reads completed (1 for a held slot). A free slot
 * (never begun, or released) is refused, *ready = 0: a polling loop on it would never end. */
gpunvme_err_t gpunvme_streamer_ready(gpunvme_streamer_t* s, uint32_t slot, int* ready);

typedef struct gpunvme_slot_view {
  const void* host;    /* CPU view of the slot */
  const void* device;  /* GPU view, or NULL without a GPU */
  uint64_t bytes;      /* bytes of the slot this layer used */
  uint32_t layer;
  uint32_t n_pieces;   /* one per extent of the layer, in order */
} gpunvme_slot_view_t;
/* Blocks (bounded: TIMEOUT) until a loading slot's reads landed, then it is held; on a held slot it
 * returns at once. view may be NULL. A free slot: INVALID_ARGUMENT. A failed read: COMMAND_FAILED
 * naming the LBA range, and the slot is free again (its bytes undefined). */
gpunvme_err_t gpunvme_streamer_wait(gpunvme_streamer_t* s, uint32_t slot, gpunvme_slot_view_t* view);
/* Where piece i's bytes start in a held slot and how many there are (either out may be NULL).
 * A slot not held (free, or still loading: it is not waited for here): INVALID_ARGUMENT;
 * index >= n_pieces: INVALID_ARGUMENT naming both. Never blocks. */
gpunvme_err_t gpunvme_streamer_piece(gpunvme_streamer_t* s, uint32_t slot, uint32_t index, uint64_t* data_offset,
                                     uint64_t* byte_length);
/* Slot offset of a file byte of the model, for tensor lookup, in a held slot. A streamer made from
 * extents (no model): INVALID_ARGUMENT; a slot not held: INVALID_ARGUMENT; a byte outside the
 * slot's layer: NOT_FOUND. Never blocks. */
gpunvme_err_t gpunvme_streamer_locate(gpunvme_streamer_t* s, uint32_t slot, uint64_t file_offset, uint64_t* slot_offset);
/* Hands a held slot back. A free slot (never begun, or released already) or a loading one:
 * INVALID_ARGUMENT. */
gpunvme_err_t gpunvme_streamer_release(gpunvme_streamer_t* s, uint32_t slot);

typedef struct gpunvme_stream_stats {
  uint64_t layers;
  uint64_t bytes;
  double io_seconds;       /* sum over layers of begin -> last completion */
  double wait_seconds;     /* time spent inside gpunvme_streamer_wait */
  double elapsed_seconds;  /* first begin -> latest wait */
  double last_layer_ms;    /* io time of the latest layer waited for */
  uint64_t prp_bytes;      /* PRP list memory of all slots */
  uint64_t template_bytes; /* command templates of all plans */
  uint64_t slot_bytes;
} gpunvme_stream_stats_t;
/* out NULL: INVALID_ARGUMENT. One thread at a time per streamer. */
gpunvme_err_t gpunvme_streamer_stats(gpunvme_streamer_t* s, gpunvme_stream_stats_t* out);

/* ---- Expert fetcher (MoE) ---- */

typedef enum gpunvme_expert_parts { GPUNVME_EXPERTS_ALL = 0, GPUNVME_EXPERTS_DOWN_ONLY = 1 } gpunvme_expert_parts_t;
typedef enum gpunvme_projection {
  GPUNVME_PROJ_GATE = 0,
  GPUNVME_PROJ_UP = 1,
  GPUNVME_PROJ_DOWN = 2,
  GPUNVME_PROJ_GATE_UP = 3
} gpunvme_projection_t;

typedef struct gpunvme_fetcher_opts {
  uint32_t max_experts_per_fetch; /* 0: 8 */
  uint32_t nsid;                  /* 0: 1 */
  uint64_t cache_bytes;           /* 0: no cache (packed scratchpad); else LRU cache budget */
  uint32_t warmup_tokens;         /* steady-state metrics start after this many fetches (0: once the cache is full) */
  int pump_thread;                /* as gpunvme_streamer_opts_t's */
} gpunvme_fetcher_opts_t;

/* The creates: *out = NULL first; NULL arrays, parts not a gpunvme_expert_parts_t, bad options, a
 * pump_thread choice unlike the queue's other users', a model of another controller:
 * INVALID_ARGUMENT; a cache budget below max_experts_per_fetch experts: INVALID_ARGUMENT;
 * scratchpad memory: RESOURCE. A failed create leaves the queue as it was. */
gpunvme_err_t gpunvme_fetcher_create_from_model(gpunvme_queue_t* queue, gpunvme_model_t* model,
                                                gpunvme_expert_parts_t parts, const gpunvme_fetcher_opts_t* opts,
                                                gpunvme_fetcher_t** out);
/* Synthetic catalogs: expert (l, e) has parts_per_expert extents at
 * parts[(l * n_experts + e) * parts_per_expert + k], projection k (0 gate, 1 up, 2 down). */
gpunvme_err_t gpunvme_fetcher_create(gpunvme_queue_t* queue, const gpunvme_extent_t* parts, uint32_t n_layers,
                                     uint32_t n_experts, uint32_t parts_per_expert, const gpunvme_fetcher_opts_t* opts,
                                     gpunvme_fetcher_t** out);
/* Drains its reads in flight and frees it; NULL is a no-op. Hands the queue back as the streamer's. */
gpunvme_err_t gpunvme_fetcher_destroy(gpunvme_fetcher_t* f);

/* Every call on a fetcher: one thread at a time (another thread's call is refused).
 * Issues the reads of `experts` (duplicates collapse) of `layer` and returns at once; *n_selected:
 * the distinct experts, in request order, indexed 0..n_selected-1 below. Ends the previous fetch.
 * *n_selected = 0 first (it may be NULL). A bad layer or expert id, more distinct experts than
 * max_experts_per_fetch: INVALID_ARGUMENT; after any failure ready/wait/expert/part refuse
 * (INVALID_ARGUMENT, "the latest gpunvme_fetcher_fetch failed") until a fetch succeeds. */
gpunvme_err_t gpunvme_fetcher_fetch(gpunvme_fetcher_t* f, uint32_t layer, const uint32_t* experts, uint32_t n,
                                    uint32_t* n_selected);
/* Per selected expert (index < n_selected, else INVALID_ARGUMENT): ready is non-blocking (*ready = 0
 * first), wait blocks (bounded: TIMEOUT; a failed read: COMMAND_FAILED). No fetch yet, or the
 * latest failed: INVALID_ARGUMENT. */
gpunvme_err_t gpunvme_fetcher_ready(gpunvme_fetcher_t* f, uint32_t index, int* ready);
gpunvme_err_t gpunvme_fetcher_wait(gpunvme_fetcher_t* f, uint32_t index);
gpunvme_err_t gpunvme_fetcher_wait_all(gpunvme_fetcher_t* f);

typedef struct gpunvme_fetched_expert {
  uint32_t expert;
  uint32_t hit;      /* nonzero: was resident, no I/O */
  uint64_t offset;   /* scratchpad offset of its first block */
  uint64_t bytes;    /* scratchpad bytes it spans */
  uint32_t n_parts;
  uint32_t reserved;
} gpunvme_fetched_expert_t;
/* What the latest (successful) fetch selected: expert index, part `part` of it (proj/offset/bytes may
 * be NULL). index or part out of range, no fetch yet, the latest failed, or (GPU) not yet waited
 * for with gpunvme_fetcher_wait_gpu: INVALID_ARGUMENT. */
gpunvme_err_t gpunvme_fetcher_expert(gpunvme_fetcher_t* f, uint32_t index, gpunvme_fetched_expert_t* out);
gpunvme_err_t gpunvme_fetcher_part(gpunvme_fetcher_t* f, uint32_t index, uint32_t part, gpunvme_projection_t* proj,
                                   uint64_t* offset, uint64_t* bytes);
/* The scratchpad's host and device views and size (each may be NULL; device NULL without a GPU). */
gpunvme_err_t gpunvme_fetcher_scratchpad(gpunvme_fetcher_t* f, const void** host, const void** device, uint64_t* bytes);

typedef struct gpunvme_fetch_metrics {
  uint64_t tokens;
  uint64_t requested;
  uint64_t faults;
  uint64_t hits;
  uint64_t bytes_read;
  uint64_t steady_tokens;
  uint64_t steady_faults;
  uint32_t last_faults;
  uint32_t cache_capacity; /* experts; 0 without cache */
} gpunvme_fetch_metrics_t;
/* out NULL: INVALID_ARGUMENT. */
gpunvme_err_t gpunvme_fetcher_metrics(gpunvme_fetcher_t* f, gpunvme_fetch_metrics_t* out);
/* counts[l] = experts of layer l resident in the cache, for l < n (0 past the catalog's layers);
 * counts NULL with n > 0: INVALID_ARGUMENT. */
gpunvme_err_t gpunvme_fetcher_resident(gpunvme_fetcher_t* f, uint32_t* counts, uint32_t n);

/* ---- GPU path (CUDA builds with a GPU) ----
 *
 * Reads are issued by GPU kernels (one warp per GPU queue) enqueued on a CUDA stream; consumers
 * order themselves after them on their own stream. The host only enqueues and never blocks on the
 * hot path. Without CUDA support or a usable GPU every call in this section (except destroying
 * NULL) returns GPUNVME_ERR_UNSUPPORTED with the reason in gpunvme_last_error_message(). */

/* cudaStream_t without the CUDA headers: the same type (struct CUstream_st*), so a cudaStream_t
 * is passed as is. NULL is the legacy default stream. */
typedef struct CUstream_st* gpunvme_cuda_stream_t;
typedef struct gpunvme_gpu_queues gpunvme_gpu_queues_t;

/* GPUNVME_OK when the GPU path can be used in this process; else GPUNVME_ERR_UNSUPPORTED and the
 * reason ("gpunvme was built without CUDA ...", "CUDA reports: ...") as the last-error message.
 * Any thread. Every call below checks this first, then its arguments as the CPU calls do: the same
 * NULL, live-handle, one-thread-per-handle and *out = NULL rules. */
gpunvme_err_t gpunvme_gpu_available(void);

/* `count` I/O queue pairs (qids first_qid .. first_qid + count - 1, `entries` deep) in GPU-mapped
 * memory, handed to GPU kernels (a GPU submitter); the host never touches them again. They count
 * as open queues of ctrl (gpunvme_ctrl_shutdown refuses while they exist). The kernels' own reads
 * (the expert fetcher's) go to namespace 1.
 * The kernels of one gpunvme_gpu_queues_t must not overlap in time: issue everything that uses it
 * (a streamer's begin_on, a fetcher's fetch_on) on one CUDA stream, or give each concurrently used
 * stream its own gpunvme_gpu_queues_t (an overlapping kernel fails its reads: "queue held by
 * another warp"). *out = NULL first; count 0, qids outside the granted range, bad entries:
 * INVALID_ARGUMENT; a failed create deletes the queue pairs it made. */
gpunvme_err_t gpunvme_gpu_queues_create(gpunvme_ctrl_t* ctrl, uint16_t first_qid, uint32_t count, uint32_t entries,
                                        gpunvme_gpu_queues_t** out);
/* Refused (INVALID_ARGUMENT, nothing freed) while a streamer or fetcher uses it; NULL is a no-op.
 * Frees the memory of the GPU streamers that used it (see gpunvme_streamer_destroy). */
gpunvme_err_t gpunvme_gpu_queues_destroy(gpunvme_gpu_queues_t* gq);

/* GPU layer streamer: arguments as gpunvme_streamer_create(_from_model); opts->pump_thread is
 * ignored. Every plan's command templates go to device memory here. The host calls (begin, wait,
 * release) work on it too (reads on an internal stream), but a slot begun with begin_on is waited
 * for with wait_on and released with release_on, and a slot released with release_on is begun
 * again with begin_on. Synchronize the compute stream before gpunvme_streamer_destroy; it waits
 * for the streamer's reads, then frees its slots and its templates' device copies. Checks and
 * returns as gpunvme_streamer_create(_from_model); several threads may create on one gq at once. */
gpunvme_err_t gpunvme_streamer_create_gpu(gpunvme_gpu_queues_t* gq, const gpunvme_extent_t* extents,
                                          const uint32_t* layer_first, uint32_t n_layers,
                                          const gpunvme_streamer_opts_t* opts, gpunvme_streamer_t** out);
gpunvme_err_t gpunvme_streamer_create_gpu_from_model(gpunvme_gpu_queues_t* gq, gpunvme_model_t* model,
                                                     int skip_experts, const gpunvme_streamer_opts_t* opts,
                                                     gpunvme_streamer_t** out);
/* A kernel on `io` reads `layer` into `slot` (after the slot's last release_on on its stream).
 * The slot life cycle is the CPU one: out of order, slot or layer out of range: INVALID_ARGUMENT;
 * a CPU streamer: UNSUPPORTED. One thread at a time per streamer (this one and those below). */
gpunvme_err_t gpunvme_streamer_begin_on(gpunvme_streamer_t* s, uint32_t layer, uint32_t slot,
                                        gpunvme_cuda_stream_t io);
/* Work enqueued on `compute` after this call runs after the slot's reads; returns at once. The view
 * is as gpunvme_streamer_wait's (view->device for kernels; view->host is the same memory, valid for
 * the CPU only once `compute` passed this point, e.g. after cudaStreamSynchronize). view may be NULL.
 * gpunvme_streamer_piece / _locate work on the slot from here until it is released. A free slot:
 * INVALID_ARGUMENT (a slot begun with gpunvme_streamer_begin is waited for here, on the host). */
gpunvme_err_t gpunvme_streamer_wait_on(gpunvme_streamer_t* s, uint32_t slot, gpunvme_cuda_stream_t compute,
                                       gpunvme_slot_view_t* view);
/* Device pointer to the state word of the slot's reads, for consumer kernels: 0 pending, 1 every
 * read succeeded, 2 a read failed (do not compute on the slot). NULL unless the slot holds a load
 * begun with begin_on and waited for with wait_on. (A getter, not a new gpunvme_slot_view_t field,
 * so the view's size stays that of API version 1.) status NULL, slot out of range: INVALID_ARGUMENT. */
gpunvme_err_t gpunvme_streamer_status(gpunvme_streamer_t* s, uint32_t slot, const uint32_t** status);
/* The slot is refilled only after the work enqueued on `compute` so far. A slot not held (free:
 * never begun or released already; loading): INVALID_ARGUMENT. */
gpunvme_err_t gpunvme_streamer_release_on(gpunvme_streamer_t* s, uint32_t slot, gpunvme_cuda_stream_t compute);
/* Host: blocks (bounded) until every begin_on's reads ended and `compute` passed every wait_on;
 * returns the first failure (GPUNVME_ERR_COMMAND_FAILED naming the LBA range, GPUNVME_ERR_TIMEOUT);
 * fills gpunvme_streamer_stats (wait_seconds: time the compute stream stalled for I/O). A CPU
 * streamer: UNSUPPORTED. */
gpunvme_err_t gpunvme_streamer_sync(gpunvme_streamer_t* s);

/* What the GPU fetcher leaves in device memory for consumer kernels (same layout as the library's
 * GpuFetchResult / GpuFetchedExpert, checked at compile time): the result (24 bytes) is followed
 * directly by experts[max_experts_per_fetch] (120 bytes each, 8-byte aligned), entries
 * 0 .. result->count - 1 valid for the latest fetch on its stream. */
#define GPUNVME_MAX_EXPERT_PARTS 4
#define GPUNVME_FETCH_ERROR_NONE 0
#define GPUNVME_FETCH_ERROR_BAD_EXPERT_ID 1 /* an id >= the model's experts per layer */
#define GPUNVME_FETCH_ERROR_TOO_MANY 2      /* more distinct experts than max_experts_per_fetch */
#define GPUNVME_FETCH_ERROR_NO_SLICES 3     /* the expert has no slices in the model */
typedef struct gpunvme_gpu_fetch_result {
  uint32_t token;       /* fetch number, from 1; experts[i].ready == token once expert i is in */
  uint32_t count;       /* distinct experts (entries of experts[]) */
  uint32_t error;       /* GPUNVME_FETCH_ERROR_*; nothing was read when set */
  uint32_t error_value; /* the offending id */
  uint32_t commands;    /* reads issued */
  uint32_t layer;
} gpunvme_gpu_fetch_result_t;
typedef struct gpunvme_gpu_fetched_expert {
  uint32_t expert;
  uint32_t hit;      /* 1: was resident in the cache, no read */
  uint64_t offset;   /* scratchpad offset of its first block */
  uint64_t bytes;    /* scratchpad bytes it spans */
  uint32_t ready;    /* == result->token once its bytes are in the scratchpad (read it volatile) */
  uint32_t failed;   /* nonzero (status field | 0x10000): a read failed; ready never matches */
  uint32_t part_count;
  uint32_t part_proj[GPUNVME_MAX_EXPERT_PARTS]; /* gpunvme_projection_t */
  uint32_t pending;  /* nonzero: a hit whose bytes a concurrent prefetch still reads; `ready` says when in */
  uint64_t part_offset[GPUNVME_MAX_EXPERT_PARTS]; /* scratchpad offset of each part's first byte */
  uint64_t part_bytes[GPUNVME_MAX_EXPERT_PARTS];
} gpunvme_gpu_fetched_expert_t;

/* GPU expert fetcher over a model's experts; opts as for the CPU fetcher (opts->nsid must be 1,
 * pump_thread is ignored). The scratchpad is GPU mapped. Checks as gpunvme_fetcher_create_from_model. */
gpunvme_err_t gpunvme_fetcher_create_gpu_from_model(gpunvme_gpu_queues_t* gq, gpunvme_model_t* model,
                                                    gpunvme_expert_parts_t parts, const gpunvme_fetcher_opts_t* opts,
                                                    gpunvme_fetcher_t** out);
/* Enqueues on `stream` the fetch of `layer`'s experts named by device_ids[0 .. n) (GPU memory, e.g.
 * written by a router kernel on the same stream; duplicates collapse; n <= 1024); returns at once.
 * Consumers enqueued on `stream` afterwards find the result at gpunvme_fetcher_device_result and
 * the bytes in the scratchpad's device view. The next fetch on the stream reuses the result memory
 * (and, without a cache, the scratchpad): enqueue a fetch's consumers before the next fetch.
 * device_ids NULL with n > 0, n > 1024: INVALID_ARGUMENT; a CPU fetcher: UNSUPPORTED. Until its
 * wait_gpu, _expert / _part refuse (the previous fetch is no longer described). */
gpunvme_err_t gpunvme_fetcher_fetch_on(gpunvme_fetcher_t* f, uint32_t layer, const uint32_t* device_ids, uint32_t n,
                                       gpunvme_cuda_stream_t stream);
/* Host: waits (bounded) for the latest fetch_on; returns a bad id / too many experts
 * (GPUNVME_ERR_INVALID_ARGUMENT) or a failed read. Afterwards gpunvme_fetcher_expert / _part / the
 * scratchpad's host view describe that fetch as for the CPU fetcher (after a failure they refuse).
 * *n_selected = 0 first; it may be NULL. A CPU fetcher: UNSUPPORTED. */
gpunvme_err_t gpunvme_fetcher_wait_gpu(gpunvme_fetcher_t* f, uint32_t* n_selected);
/* Device pointers (stable for the fetcher's life): the result, experts[], and selection[n] (for
 * each routing id of the latest fetch, the index of its distinct expert). Any may be NULL. A CPU
 * fetcher: UNSUPPORTED. */
gpunvme_err_t gpunvme_fetcher_device_result(gpunvme_fetcher_t* f, const gpunvme_gpu_fetch_result_t** result,
                                            const gpunvme_gpu_fetched_expert_t** experts,
                                            const uint32_t** selection);
/* On a GPU fetcher gpunvme_fetcher_fetch / _ready / _wait / _wait_all return GPUNVME_ERR_UNSUPPORTED
 * (use fetch_on / wait_gpu; per-expert readiness lives on the GPU); _expert, _part, _scratchpad,
 * _metrics (synchronizes the device), _resident and _destroy work on both kinds. */

#ifdef __cplusplus
}
#endif

#endif /* GPUNVME_H */
