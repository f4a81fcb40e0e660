# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled block pool: :class:`kvframe.core.block_pool.BlockPool`'s default path in C.

Built by ``scripts/build-core`` (or ``pip install -e .`` where Cython is installed);
optional: :mod:`kvframe.core.compiled` falls back to the pure-Python pool, which is
the reference, when this module is not built. Same decisions, same events, same
errors as the Python pool with vLLM's free queue (no eviction policy): the
state-machine test ``tests/core/test_compiled_pool.py`` drives both with the same
operations and compares every result.

Data layout (why it is faster, not only compiled): the free queue is two C int
arrays (``prev``/``next`` indexed by block id, two sentinel slots after the last
block), so taking and freeing blocks moves ints, not Python references; each
block's ``ref_cnt`` is a C int in its :class:`CKVCacheBlock`. The hash index is a
Python dict (hash -> block, or ``{block_id: block}`` for content held by several
blocks), probed through the C API.
"""

from cpython.dict cimport PyDict_GetItem, PyDict_SetItem, PyDict_DelItem, PyDict_Size
from cpython.list cimport PyList_GET_SIZE, PyList_GET_ITEM
from cpython.ref cimport PyObject
cdef extern from "Python.h":
    PyObject* PyDict_SetDefault(object d, object key, object default_value) except NULL
from libc.stdlib cimport malloc, free

from kvframe.contract.records import AllBlocksCleared, BlockRemoved, BlockStored


cdef class CKVCacheBlock:
    """Metadata of one KV block (the compiled core's :class:`KVCacheBlock`).

    ``block_id``, ``ref_cnt``, ``block_hash`` and ``is_null`` read and write as on
    the Python class; the free-queue links live in the pool's int arrays.
    """

    cdef public int block_id
    cdef public int ref_cnt
    cdef public object block_hash
    cdef public bint is_null

    def __cinit__(self, int block_id):
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash = None
        self.is_null = False

    def __repr__(self):
        return (
            f"KVCacheBlock(block_id={self.block_id}, ref_cnt={self.ref_cnt}, "
            f"block_hash={self.block_hash!r})"
        )


cdef class _FreeQueueView:
    """Read-only view of the compiled free queue (tests and debugging)."""

    cdef CompiledBlockPool pool

    def __cinit__(self, CompiledBlockPool pool):
        self.pool = pool

    @property
    def num_free_blocks(self):
        return self.pool.num_free

    def __len__(self):
        return self.pool.num_free

    def get_all_free_blocks(self):
        """All free blocks, head first. O(n)."""
        cdef CompiledBlockPool pool = self.pool
        cdef int i = pool.next_[pool.head]
        out = []
        while i != pool.tail:
            out.append(pool.blocks[i])
            i = pool.next_[i]
        return out

    def get_all_free_block_ids_backwards(self):
        """The free block ids tail first (the links walked the other way)."""
        cdef CompiledBlockPool pool = self.pool
        cdef int i = pool.prev_[pool.tail]
        out = []
        while i != pool.head:
            out.append(i)
            i = pool.prev_[i]
        return out


cdef class _IndexView:
    """Read-only view of the compiled hash index, with the Python map's read API."""

    cdef CompiledBlockPool pool

    def __cinit__(self, CompiledBlockPool pool):
        self.pool = pool

    def get_one_block(self, block_hash):
        return self.pool.get_cached_block(block_hash)

    def get_all_blocks(self, block_hash):
        entry = self.pool.index.get(block_hash)
        if entry is None:
            return []
        if type(entry) is dict:
            return list(entry.values())
        return [entry]

    def hashes(self):
        return list(self.pool.index)

    def __contains__(self, block_hash):
        return block_hash in self.pool.index

    def __len__(self):
        return len(self.pool.index)


cdef class CompiledBlockPool:
    """The default :class:`~kvframe.core.block_pool.BlockPool` (vLLM's LRU free queue), compiled.

    Same constructor arguments and public methods; an eviction policy is not
    accepted here (:func:`kvframe.core.compiled.make_block_pool` gives those the
    Python :class:`~kvframe.core.block_pool.PolicyOrderedBlockPool`).
    """

    cdef int* prev_
    cdef int* next_
    cdef int head
    cdef int tail
    cdef int num_free
    cdef readonly int num_gpu_blocks
    cdef readonly bint enable_caching
    cdef readonly bint enable_kv_cache_events
    cdef readonly bint uncached_freed_first
    cdef public int num_cached_blocks
    cdef int num_shared
    cdef readonly list blocks
    cdef readonly CKVCacheBlock null_block
    cdef dict index
    cdef public list kv_event_queue
    cdef readonly object report_release

    def __cinit__(self, *args, **kwargs):
        self.prev_ = NULL
        self.next_ = NULL

    def __init__(
        self,
        int num_gpu_blocks,
        bint enable_caching=True,
        bint enable_kv_cache_events=False,
        eviction_policy=None,
        *,
        bint uncached_freed_first=False,
    ):
        cdef int i
        if num_gpu_blocks < 1:
            raise ValueError(f"num_gpu_blocks must be at least 1, got {num_gpu_blocks}")
        if eviction_policy is not None:
            raise ValueError(
                "the compiled block pool orders eviction by vLLM's free queue only; an "
                "eviction policy needs the Python PolicyOrderedBlockPool"
            )
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.enable_kv_cache_events = enable_kv_cache_events
        if uncached_freed_first and type(self) is CompiledBlockPool:
            raise ValueError(
                "vLLM 0.33's free rule (uncached_freed_first) is the class "
                "CompiledUncachedFirstBlockPool; kvframe.core.compiled.make_block_pool "
                "chooses it"
            )
        self.uncached_freed_first = uncached_freed_first
        self.report_release = None
        self.prev_ = <int*>malloc((num_gpu_blocks + 2) * sizeof(int))
        self.next_ = <int*>malloc((num_gpu_blocks + 2) * sizeof(int))
        if self.prev_ == NULL or self.next_ == NULL:
            raise MemoryError()
        self.head = num_gpu_blocks
        self.tail = num_gpu_blocks + 1
        self.blocks = [CKVCacheBlock(i) for i in range(num_gpu_blocks)]
        # The queue in id order, then block 0 taken out as the null block.
        for i in range(num_gpu_blocks):
            self.prev_[i] = i - 1
            self.next_[i] = i + 1
        self.prev_[0] = self.head
        self.next_[num_gpu_blocks - 1] = self.tail
        self.next_[self.head] = 0
        self.prev_[self.head] = -1
        self.prev_[self.tail] = num_gpu_blocks - 1
        self.next_[self.tail] = -1
        self.num_free = num_gpu_blocks
        self._unlink(0)
        self.null_block = self.blocks[0]
        self.null_block.is_null = True
        self.index = {}
        self.num_shared = 0
        self.num_cached_blocks = 0
        self.kv_event_queue = []

    def __dealloc__(self):
        free(self.prev_)
        free(self.next_)

    cdef inline void _unlink(self, int i):
        cdef int p = self.prev_[i]
        cdef int n = self.next_[i]
        self.next_[p] = n
        self.prev_[n] = p
        self.prev_[i] = -1
        self.next_[i] = -1
        self.num_free -= 1

    cdef inline void _append(self, int i):
        cdef int last = self.prev_[self.tail]
        self.next_[last] = i
        self.prev_[i] = last
        self.next_[i] = self.tail
        self.prev_[self.tail] = i
        self.num_free += 1

    cdef inline void _prepend(self, int i, int after):
        """Insert block ``i`` right after ``after`` (the head sentinel or a block)."""
        cdef int n = self.next_[after]
        self.next_[after] = i
        self.prev_[i] = after
        self.next_[i] = n
        self.prev_[n] = i
        self.num_free += 1

    @property
    def free_block_queue(self):
        return _FreeQueueView(self)

    @property
    def cached_block_hash_to_block(self):
        return _IndexView(self)

    def is_in_free_queue(self, int block_id):
        """Whether block ``block_id`` is linked into the free queue."""
        return self.prev_[block_id] != -1

    # ---------------------------------------------------------------- lookup

    def get_cached_block(self, block_hash):
        cdef PyObject* entry = PyDict_GetItem(self.index, block_hash)
        if entry == NULL:
            return None
        obj = <object>entry
        if type(obj) is dict:
            return next(iter((<dict>obj).values()))
        return obj

    def get_cached_prefix(self, block_hashes, Py_ssize_t max_num_blocks):
        cdef Py_ssize_t end = len(block_hashes)
        cdef Py_ssize_t i
        cdef PyObject* entry
        cdef list found = []
        cdef dict index = self.index
        if max_num_blocks < end:
            end = max_num_blocks
        for i in range(end):
            entry = PyDict_GetItem(index, block_hashes[i])
            if entry == NULL:
                break
            obj = <object>entry
            if self.num_shared and type(obj) is dict:
                obj = next(iter((<dict>obj).values()))
            found.append(obj)
        return found

    def record_lookup(self, block_hashes):
        """The default pool learns nothing from lookups."""

    # --------------------------------------------------------------- caching

    cdef void _insert(self, object block_hash, CKVCacheBlock block) except *:
        # One probe in the common case: setdefault returns the block itself when the
        # hash was not indexed yet.
        cdef PyObject* entry = PyDict_SetDefault(self.index, block_hash, block)
        if entry == <PyObject*>block:
            return
        obj = <object>entry
        if type(obj) is dict:
            PyDict_SetItem(<dict>obj, block.block_id, block)
        else:
            self.index[block_hash] = {(<CKVCacheBlock>obj).block_id: obj, block.block_id: block}
            self.num_shared += 1

    cdef void _pop(self, object block_hash, CKVCacheBlock block) except *:
        cdef PyObject* entry
        if self.num_shared == 0:
            # Every entry is one block, and a block with a hash is indexed under it
            # (the pool's invariant): one probe.
            PyDict_DelItem(self.index, block_hash)
            return
        entry = PyDict_GetItem(self.index, block_hash)
        if entry == NULL:
            return
        obj = <object>entry
        if obj is block:
            PyDict_DelItem(self.index, block_hash)
            return
        if type(obj) is not dict:
            return
        (<dict>obj).pop(block.block_id, None)
        if PyDict_Size(<dict>obj) == 1:
            (self.index[block_hash],) = (<dict>obj).values()
            self.num_shared -= 1

    def cache_full_blocks(
        self,
        request,
        blocks,
        Py_ssize_t num_cached_blocks,
        Py_ssize_t num_full_blocks,
        int block_size,
    ):
        self._cache_full(request, blocks, num_cached_blocks, num_full_blocks, block_size)

    cdef void _cache_full(
        self,
        object request,
        object blocks,
        Py_ssize_t num_cached_blocks,
        Py_ssize_t num_full_blocks,
        int block_size,
    ) except *:
        cdef Py_ssize_t i
        cdef CKVCacheBlock block
        if num_cached_blocks >= num_full_blocks:
            return
        block_hashes = request.block_hashes
        if len(block_hashes) < num_full_blocks:
            raise ValueError(
                f"request {request.request_id!r} has {len(block_hashes)} block hashes, "
                f"{num_full_blocks} needed: was it built with a block hasher?"
            )
        for i in range(num_cached_blocks, num_full_blocks):
            block = <CKVCacheBlock?>blocks[i]
            if block.block_hash is not None:
                raise AssertionError(f"block {block.block_id} is already cached")
            block_hash = block_hashes[i]
            block.block_hash = block_hash
            self._insert(block_hash, block)
        self.num_cached_blocks += num_full_blocks - num_cached_blocks
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(
                BlockStored(
                    block_hashes=tuple(block_hashes[num_cached_blocks:num_full_blocks]),
                    parent_block_hash=block_hashes[num_cached_blocks - 1]
                    if num_cached_blocks > 0
                    else None,
                    block_size=block_size,
                )
            )

    cdef void _drop_hash(self, CKVCacheBlock block) except *:
        block_hash = block.block_hash
        self._pop(block_hash, block)
        block.block_hash = None
        self.num_cached_blocks -= 1
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(BlockRemoved(block_hashes=(block_hash,)))

    # ------------------------------------------------------------ allocation

    def get_new_blocks(self, int num_blocks):
        return self._get_new(num_blocks)

    cdef list _get_new(self, int num_blocks):
        cdef int k
        cdef int i
        cdef int following
        cdef CKVCacheBlock block
        cdef list out
        cdef list blocks = self.blocks
        if num_blocks > self.num_free:
            raise ValueError(f"cannot get {num_blocks} free blocks, only {self.num_free} free")
        if num_blocks <= 0:
            return []
        out = [None] * num_blocks
        i = self.next_[self.head]
        for k in range(num_blocks):
            block = <CKVCacheBlock>PyList_GET_ITEM(blocks, i)
            if block.block_hash is not None:
                self._drop_hash(block)
            block.ref_cnt = 1
            out[k] = block
            following = self.next_[i]
            self.prev_[i] = -1
            self.next_[i] = -1
            i = following
        self.next_[self.head] = i
        self.prev_[i] = self.head
        self.num_free -= num_blocks
        return out

    def touch(self, blocks):
        cdef CKVCacheBlock block
        for obj in blocks:
            block = <CKVCacheBlock?>obj
            if block.ref_cnt == 0 and not block.is_null:
                if self.prev_[block.block_id] == -1:
                    raise RuntimeError(f"touch() of a free block not in the free queue: {block!r}")
                self._unlink(block.block_id)
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks):
        cdef CKVCacheBlock block
        for obj in ordered_blocks:
            block = <CKVCacheBlock?>obj
            block.ref_cnt -= 1
            if block.ref_cnt == 0 and not block.is_null:
                self._append(block.block_id)

    def free_table_reversed(self, list table):
        """``free_blocks(reversed(table))`` without the iterator (the manager's ``free``)."""
        cdef Py_ssize_t k
        cdef CKVCacheBlock block
        for k in range(PyList_GET_SIZE(table) - 1, -1, -1):
            block = <CKVCacheBlock?>PyList_GET_ITEM(table, k)
            block.ref_cnt -= 1
            if block.ref_cnt == 0 and not block.is_null:
                self._append(block.block_id)

    def evict_blocks(self, block_ids):
        cdef CKVCacheBlock block
        for block_id in block_ids:
            block = self.blocks[block_id]
            if block.block_hash is not None:
                self._drop_hash(block)

    def reset_prefix_cache(self):
        cdef CKVCacheBlock block
        if self.num_gpu_blocks - self.num_free != 1:
            return False
        self.index = {}
        self.num_shared = 0
        for block in self.blocks:
            block.block_hash = None
        self.num_cached_blocks = 0
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(AllBlocksCleared())
        return True

    # ----------------------------------------------------------------- state

    def get_num_free_blocks(self):
        return self.num_free

    def get_usage(self):
        cdef int usable = self.num_gpu_blocks - 1
        if usable == 0:
            return 0.0
        return 1.0 - (<double>self.num_free) / usable

    def take_events(self):
        if not self.enable_kv_cache_events:
            return []
        events = self.kv_event_queue
        self.kv_event_queue = []
        return events


cdef class CompiledUncachedFirstBlockPool(CompiledBlockPool):
    """:class:`CompiledBlockPool` under vLLM 0.33's free-queue rule (switch D,
    ``uncached_freed_first``): the compiled twin of
    :class:`kvframe.core.block_pool.UncachedFirstBlockPool`.

    Why a subclass: the rule is chosen once, when the pool is built
    (:func:`kvframe.core.compiled.make_block_pool`), the same way in both cores,
    so neither free loop tests it per call.
    """

    def __init__(
        self,
        int num_gpu_blocks,
        bint enable_caching=True,
        bint enable_kv_cache_events=False,
        eviction_policy=None,
        *,
        bint uncached_freed_first=True,
    ):
        if not uncached_freed_first:
            raise ValueError(
                "CompiledUncachedFirstBlockPool is vLLM 0.33's free rule; "
                "use CompiledBlockPool for 0.19.1's"
            )
        CompiledBlockPool.__init__(
            self,
            num_gpu_blocks,
            enable_caching,
            enable_kv_cache_events,
            eviction_policy,
            uncached_freed_first=True,
        )

    def free_blocks(self, ordered_blocks):
        """Blocks without a hash (every block with caching off) go to the front, in
        the order given; cached ones to the back."""
        cdef CKVCacheBlock block
        cdef int after = self.head
        for obj in ordered_blocks:
            block = <CKVCacheBlock?>obj
            block.ref_cnt -= 1
            if block.ref_cnt == 0 and not block.is_null:
                if block.block_hash is None or not self.enable_caching:
                    self._prepend(block.block_id, after)
                    after = block.block_id
                else:
                    self._append(block.block_id)

    def free_table_reversed(self, list table):
        """``free_blocks(reversed(table))`` (the manager's ``free``)."""
        self.free_blocks(reversed(table))


cdef class CompiledAllocator:
    """The KV cache manager's per-step allocation paths over a :class:`CompiledBlockPool`.

    :class:`~kvframe.core.kv_cache_manager.KVCacheManager` binds its
    ``allocate_slots``, ``_cache_blocks`` and ``_set_decode_limit`` to these
    when it runs on the compiled core: the one-token allocation (a decode
    crossing or filling a block, half a million calls in a whole-trace replay)
    runs here end to end, slot arithmetic, new blocks, caching and the decode
    limit; every other allocation goes to the manager's Python path
    (``general``), which calls back into the compiled caching. The manager's
    dicts are shared, not copied: both paths see one state.
    """

    cdef CompiledBlockPool pool
    cdef object manager
    cdef object general
    cdef dict req_to_blocks
    cdef dict num_cached_block
    cdef dict decode_limits
    cdef object uncomputed
    cdef int block_size
    cdef int max_model_len
    cdef int decode_lookahead
    cdef bint enable_caching

    def __init__(self, manager, general):
        self.manager = manager
        self.general = general
        self.pool = manager.block_pool
        self.req_to_blocks = manager.req_to_blocks
        self.num_cached_block = manager.num_cached_block
        self.decode_limits = manager.decode_limits
        self.uncomputed = manager.uncomputed
        self.block_size = manager.block_size
        self.max_model_len = manager.max_model_len
        self.decode_lookahead = manager.decode_lookahead
        self.enable_caching = manager.enable_caching

    def allocate_slots(
        self,
        request,
        int num_new_tokens,
        int num_new_computed_tokens=0,
        new_computed_blocks=(),
        int num_lookahead_tokens=0,
        int num_external_computed_tokens=0,
        bint delay_cache_blocks=False,
        int reserved_blocks=0,
    ):
        cdef PyObject* table
        if (
            num_new_tokens == 1
            and not num_new_computed_tokens
            and not num_external_computed_tokens
            and not delay_cache_blocks
            and not new_computed_blocks
            and not reserved_blocks
            and self.manager.one_token_path
        ):
            table = PyDict_GetItem(self.req_to_blocks, request.request_id)
            if table != NULL:
                return self._one_token(request, <list>table, num_lookahead_tokens)
        return self.general(
            request,
            num_new_tokens,
            num_new_computed_tokens,
            new_computed_blocks,
            num_lookahead_tokens,
            num_external_computed_tokens,
            delay_cache_blocks,
            reserved_blocks,
        )

    cdef object _one_token(self, object request, list req_blocks, int num_lookahead_tokens):
        cdef long total_computed = request.num_computed_tokens
        cdef long need
        cdef long num_new_blocks
        cdef list new_blocks
        cdef long num_tokens
        if total_computed > self.max_model_len:
            total_computed = self.max_model_len
        need = total_computed + 1 + num_lookahead_tokens
        if need > self.max_model_len:
            need = self.max_model_len
        num_new_blocks = (need + self.block_size - 1) // self.block_size - len(req_blocks)
        if num_new_blocks > 0:
            if num_new_blocks > self.pool.num_free:
                return None
            new_blocks = self.pool._get_new(num_new_blocks)
            req_blocks.extend(new_blocks)
        else:
            new_blocks = []
        if self.enable_caching:
            num_tokens = request.num_tokens
            if total_computed + 1 < num_tokens:
                num_tokens = total_computed + 1
            self._cache(request, req_blocks, num_tokens)
        self._decode_limit(request.request_id, len(req_blocks))
        return new_blocks

    cdef void _cache(self, object request, list req_blocks, long num_tokens) except *:
        request_id = request.request_id
        cdef PyObject* entry = PyDict_GetItem(self.num_cached_block, request_id)
        cdef long num_cached = 0 if entry == NULL else <long><object>entry
        cdef long num_full = num_tokens // self.block_size
        if num_cached >= num_full:
            return
        if self.uncomputed.blocks:
            self.uncomputed.forget(req_blocks[num_cached:num_full])
        self.pool._cache_full(request, req_blocks, num_cached, num_full, self.block_size)
        self.num_cached_block[request_id] = num_full

    cdef void _decode_limit(self, object request_id, long num_table_blocks) except *:
        cdef long block_size = self.block_size
        cdef long limit = num_table_blocks * block_size - 1 - self.decode_lookahead
        cdef long cached_limit
        cdef PyObject* entry
        if self.enable_caching:
            entry = PyDict_GetItem(self.num_cached_block, request_id)
            cached_limit = ((0 if entry == NULL else <long><object>entry) + 1) * block_size - 2
            if cached_limit < limit:
                limit = cached_limit
        if limit > self.max_model_len - 2:
            limit = self.max_model_len - 2
        self.decode_limits[request_id] = limit

    def cache_blocks_of(self, request, list req_blocks, long num_tokens):
        """The manager's ``_cache_blocks``."""
        self._cache(request, req_blocks, num_tokens)

    def set_decode_limit(self, request_id, long num_table_blocks):
        """The manager's ``_set_decode_limit``."""
        self._decode_limit(request_id, num_table_blocks)
