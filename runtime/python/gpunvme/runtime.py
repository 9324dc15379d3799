"""gpunvme.runtime: the layer streamer and the expert fetcher, for engine authors who write Python.

The runtime's C API (runtime/capi/gpunvme.h) bound by the C++ module gpunvme._runtime. A Device is a
controller (emulated, 'emu:FILE' or 'emu:ram,size=256M'; or 'vfio:BDF'); Device.open_model() finds the GGUF
model on it and gives it an I/O queue of its own, which its streamers and fetchers share. Model.streamer() reads whole layers (blk.N) into slots; Model.fetcher() reads
the experts a router chose. The bytes come as read-only memoryviews of the slot or scratchpad memory, with
no copy (numpy.frombuffer(view, dtype) makes an array of them, also without a copy); on the GPU path a
Slot also has its device pointer and __cuda_array_interface__.

    from gpunvme.runtime import Device
    with Device("emu:model.gguf") as dev, dev.open_model() as model:
        with model.streamer(slots=2) as streamer:
            for slot in streamer.layers(timeout=10.0):        # layer l+1 loads while l is used
                q = slot.tensor(f"blk.{slot.layer}.attn_q.weight")   # memoryview of its bytes
        with model.fetcher(max_experts=8) as fetcher:
            fetch = fetcher.fetch(layer=0, experts=[3, 1]).wait(timeout=10.0)
            for e in fetch:                                   # e.expert, e.hit, e.data, e.parts["down"]
                ...

Rules: every wait takes a timeout in seconds (above 0; TimeoutError when it passes, and waiting again is
allowed); a closed object refuses further use with ValueError; bad ids name the valid range (ValueError).
A view stays readable after its slot is released or its streamer/fetcher closed (the memory lives as long
as a view of it), but a released slot is refilled by later loads and a fetch's scratchpad bytes by later
fetches: use the bytes before that. Objects are freed by close(), by `with`, or when garbage collected,
children before their parents, whatever the order of the calls. Threads may share these objects: their
calls run one at a time (under the GIL), and a thread's wait lets the others' calls run between its polls.
"""
from . import _runtime

__all__ = ["Device", "Model", "Streamer", "Slot", "Fetcher", "Fetch", "Expert", "GpuQueues", "GpuStreamer", "GpuSlot",
           "GpuFetcher", "gpu_available"]

DEFAULT_TIMEOUT = 10.0


def gpu_available():
    """True when this build and process can use the GPU path (a CUDA build and a usable GPU)."""
    return _runtime.gpu_available()


def _cuda_array_interface(ptr, nbytes):
    """CUDA array libraries' description (CuPy, Numba, PyTorch) of nbytes read-only bytes at GPU address ptr."""
    if not ptr:
        raise AttributeError("no GPU view here (no CUDA or no GPU): use the memoryview")
    return {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, True), "version": 3}


def _stream(stream):
    """A CUDA stream as the address of its cudaStream_t: an int (0: the legacy default stream), a
    torch.cuda.Stream (.cuda_stream) or a cupy.cuda.Stream (.ptr)."""
    for attr in ("cuda_stream", "ptr"):
        stream = getattr(stream, attr, stream)
    if not isinstance(stream, int) or stream < 0:
        raise TypeError(f"a CUDA stream is an int (a cudaStream_t's address; 0: the default stream), a "
                        f"torch.cuda.Stream or a cupy.cuda.Stream, not {stream!r}")
    return stream


class _Closing:
    """close() on leaving a `with` block."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class Device(_Closing):
    """A controller.

    Device(spec, queue_entries=256): spec as the CLI's --device: 'emu:FILE' (a GGUF file or a disk image:
    the emulated controller's namespace), 'emu:ram,size=256M', 'vfio:0000:0b:00.0'. Raises ValueError for
    a malformed spec, FileNotFoundError for a missing device, PermissionError without access.
    queue_entries: the depth of each model's I/O queue (2..info()["max_queue_entries"]).
    The controller shuts down when the Device and everything made from it are closed or collected.
    """

    def __init__(self, spec, queue_entries=256):
        self._d = _runtime.Device(spec, queue_entries)

    @property
    def spec(self):
        """The device string it was opened with."""
        return self._d.spec

    @property
    def closed(self):
        return self._d.closed

    def info(self):
        """Identify data: io_queues, max_queue_entries, max_transfer_bytes, namespaces, and namespace 1's
        blocks and block_bytes."""
        return self._d.info()

    def open_model(self, nsid=1, start_lba=None):
        """The GGUF model on namespace `nsid` (a `gpunvme deploy` record, or a GGUF at LBA 0 such as
        'emu:model.gguf'; start_lba: where it starts, when not detected), on an I/O queue of its own (one
        of info()["io_queues"]; RuntimeError when open models hold them all). RuntimeError when no model
        is found."""
        return Model(self, self._d, nsid, start_lba)

    def gpu_queues(self, count=1, entries=256):
        """A GpuQueues set for the GPU path: `count` queue pairs driven by GPU warps (one per CUDA stream
        that issues reads at a time). NotImplementedError without CUDA or a GPU, with the reason."""
        return GpuQueues(_runtime.GpuQueues(self._d, count, entries))

    def close(self):
        """No further use of this object; the controller goes once its models, streamers and fetchers
        (and their views) are gone too."""
        self._d.close()


class Model(_Closing):
    """A GGUF model on a Device (made by Device.open_model()): its layers (blk.0 .. blk.{n_layers-1}) and experts per layer."""

    def __init__(self, device, raw_device, nsid, start_lba):
        self.device = device
        self._m = _runtime.Model(raw_device, nsid, start_lba)

    @property
    def n_layers(self):
        """Layers of the model (blk.N tensors)."""
        return self._m.n_layers

    @property
    def n_experts(self):
        """Experts per layer (0 for a dense model)."""
        return self._m.n_experts

    def tensor(self, name):
        """(file_offset, nbytes) of a tensor: its absolute byte offset in the GGUF file and its size.
        KeyError when the model has no such tensor."""
        return self._m.tensor(name)

    def streamer(self, slots=2, skip_experts=True, max_command_bytes=0, pump_thread=False):
        """A layer Streamer over every blk.N layer, with `slots` slots of host memory (the GPU path's
        slots: see the C API). skip_experts leaves MoE expert tensors to the fetcher. pump_thread: a host
        thread keeps the queue fed while Python computes (all streamers/fetchers of a Device must agree)."""
        return Streamer(self, _runtime.Streamer(self._m, slots, skip_experts, max_command_bytes, pump_thread))

    def fetcher(self, max_experts=8, cache_bytes=0, down_only=False, pump_thread=False):
        """An expert Fetcher: up to `max_experts` distinct experts per fetch; cache_bytes > 0 keeps
        experts resident (LRU) across fetches; down_only fetches only the down projections."""
        return Fetcher(_runtime.Fetcher(self._m, max_experts, cache_bytes, down_only, pump_thread))

    def gpu_streamer(self, gpu_queues, slots=2, skip_experts=True, max_command_bytes=0):
        """A GpuStreamer over every blk.N layer: GPU kernels on `gpu_queues` (Device.gpu_queues()) read the
        layers into slots of GPU memory, ordered on CUDA streams. NotImplementedError without a GPU."""
        return GpuStreamer(self, _runtime.Streamer(self._m, gpu_queues._q, slots, skip_experts, max_command_bytes))

    def gpu_fetcher(self, gpu_queues, max_experts=8, cache_bytes=0, down_only=False):
        """A GpuFetcher: GPU kernels on `gpu_queues` read the experts whose ids a kernel (a router) wrote to
        GPU memory, ordered on CUDA streams; its scratchpad is GPU memory. NotImplementedError without a GPU."""
        return GpuFetcher(_runtime.Fetcher(self._m, gpu_queues._q, max_experts, cache_bytes, down_only))

    def close(self):
        """No further use; streamers and fetchers made from it keep working (its queue goes with them)."""
        self._m.close()


class _HeldSlot(_Closing):
    """What the slots of both paths share: the layer they hold and where it is."""

    def __init__(self, model, raw):
        self._model, self._s = model, raw

    slot = property(lambda self: self._s.slot, doc="The slot's index.")
    layer = property(lambda self: self._s.layer, doc="The layer it holds.")
    nbytes = property(lambda self: self._s.nbytes, doc="Bytes of the slot this layer uses.")
    released = property(lambda self: self._s.released, doc="True once released (or its streamer closed).")

    def pieces(self):
        """[(offset in the slot, nbytes)] of the layer's extents, in plan order."""
        return self._s.pieces()

    @property
    def device_ptr(self):
        """The slot's GPU address (0 without a GPU view)."""
        return self._s.device_ptr

    @property
    def __cuda_array_interface__(self):
        """The slot's bytes for CUDA array libraries (CuPy, Numba, PyTorch): uint8, nbytes long, read-only.
        AttributeError where the slot has no GPU view (a CPU build, or no GPU)."""
        return _cuda_array_interface(self._s.device_ptr, self._s.nbytes)


class Slot(_HeldSlot):
    """A slot holding one layer's bytes, from Streamer.acquire() until release() (or the `with` block's
    end). The views stay readable afterwards but the slot is refilled by the next load into it."""

    @property
    def data(self):
        """The layer's bytes in the slot (every piece, block-aligned as read) as a read-only memoryview."""
        return self._s.data()

    def tensor(self, name):
        """The bytes of tensor `name` of this layer, a read-only memoryview into the slot (no copy).
        KeyError when the tensor is not part of this layer."""
        return self._s.tensor(self._model._m, name)

    def release(self):
        """Hands the slot back for the next load; twice is harmless."""
        self._s.release()

    close = release


class Streamer(_Closing):
    """The layer streamer (made by Model.streamer()): slots that whole layers are read into.

    A slot's life: begin(layer, slot) issues the reads and returns at once; acquire(slot, timeout) waits
    for them and gives a Slot; Slot.release() frees the slot for the next begin. load() is begin plus
    acquire; layers() runs the whole model, the next layers loading while one is used.
    """

    def __init__(self, model, raw):
        self._model, self._s = model, raw

    n_layers = property(lambda self: self._s.n_layers, doc="Layers in the streamer's plan.")
    n_slots = property(lambda self: self._s.n_slots, doc="Slots (layers held or loading at once).")
    closed = property(lambda self: self._s.closed)

    def begin(self, layer, slot):
        """Issues the reads of `layer` into free `slot`; returns at once. ValueError for a layer or slot
        out of range or a slot not free."""
        self._s.begin(layer, slot)

    def ready(self, slot):
        """True once the slot's reads landed (non-blocking). ValueError for a slot never begun."""
        return self._s.ready(slot)

    def acquire(self, slot, timeout=DEFAULT_TIMEOUT):
        """Waits up to `timeout` seconds for the slot's reads and returns the held Slot. TimeoutError when
        they did not land (the slot keeps loading: acquire again); a failed read raises RuntimeError."""
        return Slot(self._model, self._s.acquire(slot, timeout))

    def load(self, layer, slot=0, timeout=DEFAULT_TIMEOUT):
        """begin(layer, slot) then acquire(slot, timeout)."""
        self.begin(layer, slot)
        return self.acquire(slot, timeout)

    def layers(self, first=0, count=None, timeout=DEFAULT_TIMEOUT):
        """Yields a held Slot per layer first .. first+count-1 (all by default), in order; n_slots layers
        are read ahead, and each slot is released when the loop asks for the next layer."""
        last = self.n_layers if count is None else first + count
        if not 0 <= first <= last <= self.n_layers:
            raise ValueError(f"layers {first}..{last - 1} are not all in the plan's {self.n_layers} layers")
        k = self.n_slots
        for layer in range(first, min(first + k, last)):
            self.begin(layer, (layer - first) % k)
        for layer in range(first, last):
            slot = (layer - first) % k
            with self.acquire(slot, timeout) as held:
                yield held
            if layer + k < last:
                self.begin(layer + k, slot)

    def stats(self):
        """layers and bytes read, io_seconds, wait_seconds, slot_bytes."""
        return self._s.stats()

    def close(self):
        """No further use; the slots' memory goes with the last view of it."""
        self._s.close()


class GpuQueues(_Closing):
    """Queue pairs driven by GPU warps (Device.gpu_queues()). The reads of one set must not overlap in time:
    issue everything that uses it on one CUDA stream, or give each stream its own set."""

    def __init__(self, raw):
        self._q = raw

    qids = property(lambda self: self._q.qids, doc="(first, last) queue id of the set.")

    def close(self):
        """No further use; the queues go once their streamers are gone too."""
        self._q.close()


class GpuSlot(_HeldSlot):
    """A slot of a GpuStreamer after wait_on(): the layer's bytes in GPU memory for work enqueued on that
    stream afterwards. Kernels should check the word at status_ptr (uint32: 1 every read succeeded, 2 one
    failed). release_on(stream) hands it back after the work enqueued on `stream` so far."""

    status_ptr = property(lambda self: self._s.status_ptr, doc="GPU address of the reads' state word.")

    def tensor(self, name):
        """(GPU address, nbytes) of tensor `name` of this layer; KeyError when it is not part of it."""
        return self._s.tensor(self._model._m, name)

    def release_on(self, stream=0):
        """The slot is refilled only after the work enqueued on `stream` so far; twice is harmless."""
        self._s.release_on(_stream(stream))

    def close(self):
        """release_on(0): after the work on the default stream."""
        self.release_on(0)


class GpuStreamer(_Closing):
    """The GPU path's layer streamer (made by Model.gpu_streamer()): begin_on(layer, slot, io) enqueues a kernel on stream `io` that reads
    the layer; wait_on(slot, compute) makes work enqueued on `compute` afterwards run after those reads and
    returns the GpuSlot at once; GpuSlot.release_on(compute) frees the slot after that work. Nothing here
    blocks the host but sync(), which waits (bounded) for every read and raises the first failure.
    Streams: an int (a cudaStream_t's address; 0: the default stream), torch.cuda.Stream, cupy.cuda.Stream.
    Synchronize the compute stream before close()."""

    def __init__(self, model, raw):
        self._model, self._s = model, raw

    n_layers = property(lambda self: self._s.n_layers, doc="Layers in the streamer's plan.")
    n_slots = property(lambda self: self._s.n_slots, doc="Slots (layers held or loading at once).")
    closed = property(lambda self: self._s.closed)

    def begin_on(self, layer, slot, stream=0):
        """Enqueues the reads of `layer` into free `slot` on `stream`; returns at once."""
        self._s.begin_on(layer, slot, _stream(stream))

    def wait_on(self, slot, stream=0):
        """Orders work enqueued on `stream` after the slot's reads; returns the GpuSlot at once."""
        return GpuSlot(self._model, self._s.wait_on(slot, _stream(stream)))

    def sync(self):
        """Blocks (bounded by the runtime) until every read ended and the compute streams passed every
        wait_on; raises the first failure (RuntimeError naming the LBA range, TimeoutError)."""
        self._s.sync()

    def stats(self):
        """layers and bytes read, io_seconds, wait_seconds (the compute stream's stalls), slot_bytes."""
        return self._s.stats()

    def close(self):
        """No further use; the slots' memory goes with the last GpuSlot and the GpuQueues."""
        self._s.close()


class Expert:
    """One fetched expert: its id, whether it was a cache hit (no read), its bytes in the scratchpad
    (data: the whole span, block-aligned as read) and parts: {projection ('gate', 'up', 'down',
    'gate_up'): memoryview of that projection's bytes of the expert}. Where the scratchpad has a GPU
    view: device_ptr (the span's GPU address, else 0), __cuda_array_interface__ (the span), and
    device_parts: {projection: (GPU address, nbytes)}."""

    __slots__ = ("expert", "hit", "data", "parts", "device_ptr", "device_parts")

    def __init__(self, expert, hit, data, device_ptr, parts):
        self.expert, self.hit, self.data, self.device_ptr = expert, hit, data, device_ptr
        self.parts = {name: view for name, view, _ in parts}
        self.device_parts = {name: (ptr, len(view)) for name, view, ptr in parts if ptr}

    @property
    def __cuda_array_interface__(self):
        """The span's bytes for CUDA array libraries; AttributeError without a GPU view."""
        return _cuda_array_interface(self.device_ptr, len(self.data))

    def __repr__(self):
        return f"Expert({self.expert}, hit={self.hit}, parts={sorted(self.parts)})"


class Fetch:
    """The experts of one Fetcher.fetch(): the distinct ids in request order. wait() for them, then
    index it (fetch[i], in the order of .experts), iterate it, or look an id up (fetch.expert(id)).
    A later fetch on the same Fetcher replaces it (ValueError on use)."""

    def __init__(self, raw):
        self._f = raw

    layer = property(lambda self: self._f.layer, doc="The layer fetched.")
    experts = property(lambda self: self._f.experts, doc="The distinct expert ids, in request order.")

    def wait(self, timeout=DEFAULT_TIMEOUT):
        """Waits up to `timeout` seconds (per expert) for every expert's bytes; returns self. TimeoutError
        when one did not land; a failed read raises RuntimeError."""
        self._f.wait(timeout)
        return self

    def __len__(self):
        return len(self._f.experts)

    def __getitem__(self, index):
        if index < 0:
            index += len(self)
        return Expert(*self._f.expert(index))

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def expert(self, expert_id):
        """The Expert with id `expert_id`; KeyError when this fetch did not ask for it."""
        ids = self._f.experts
        if expert_id not in ids:
            raise KeyError(f"expert {expert_id} is not part of this fetch (it has {ids})")
        return self[ids.index(expert_id)]


class Fetcher(_Closing):
    """The expert fetcher (made by Model.fetcher()): fetch(layer, experts) issues the reads of the experts a router chose and
    returns a Fetch at once."""

    def __init__(self, raw):
        self._f = raw

    max_experts = property(lambda self: self._f.max_experts, doc="Distinct experts one fetch may ask for.")
    closed = property(lambda self: self._f.closed)

    def fetch(self, layer, experts):
        """Issues the reads of `experts` (ids; duplicates collapse) of `layer`. ValueError for a layer or
        expert id out of range, no ids, or more distinct ids than max_experts."""
        return Fetch(self._f.fetch(layer, list(experts)))

    def metrics(self):
        """fetches, requested, faults, hits, bytes_read, cache_capacity."""
        return self._f.metrics()

    def close(self):
        """No further use; the scratchpad goes with the last view of it."""
        self._f.close()


class GpuFetcher(_Closing):
    """The GPU path's expert fetcher (made by Model.gpu_fetcher()): fetch_on(layer, ids, stream) enqueues the fetch of the experts whose
    uint32 ids lie in GPU memory (a router kernel's output; duplicates collapse) and returns at once;
    consumers enqueued on `stream` afterwards find the result at device_result() and the bytes in the
    scratchpad. wait() blocks (bounded by the runtime) for the latest fetch_on and returns it as a Fetch
    (its experts' memoryviews and GPU addresses); bad ids or too many distinct experts raise there."""

    def __init__(self, raw):
        self._f = raw

    max_experts = property(lambda self: self._f.max_experts, doc="Distinct experts one fetch may ask for.")
    closed = property(lambda self: self._f.closed)

    def fetch_on(self, layer, ids, stream=0):
        """ids: a 1-D uint32 GPU array (anything with __cuda_array_interface__: CuPy, PyTorch, Numba) or
        (GPU address, count). Enqueues the reads on `stream`; returns at once."""
        cai = getattr(ids, "__cuda_array_interface__", None)
        if cai is not None:
            if cai.get("typestr") != "<u4" or len(cai["shape"]) != 1 or cai.get("strides") not in (None, (4,)):
                raise ValueError(f"expert ids must be a contiguous 1-D uint32 array on the GPU, not {cai.get('typestr')} "
                                 f"of shape {cai['shape']}")
            ptr, n = cai["data"][0], cai["shape"][0]
        else:
            ptr, n = ids
        self._f.fetch_on(layer, ptr, n, _stream(stream))

    def wait(self):
        """The latest fetch_on, once done, as a Fetch; ValueError for a bad id or too many experts."""
        return Fetch(self._f.wait_gpu())

    def device_result(self):
        """GPU addresses (result, experts, selection) of what the latest fetch left for consumer kernels
        (gpunvme_gpu_fetch_result_t, gpunvme_gpu_fetched_expert_t[], uint32 per routing id: see gpunvme.h)."""
        return self._f.device_result()

    def metrics(self):
        """fetches, requested, faults, hits, bytes_read, cache_capacity."""
        return self._f.metrics()

    def close(self):
        """No further use; the scratchpad goes with the last view of it and the GpuQueues."""
        self._f.close()
