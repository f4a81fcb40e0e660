# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled block hashing: the optional fast path of :mod:`kvframe.core.hashing`.

Why: hashing prompt blocks is the largest single cost of a trace replay in pure
Python, and most of it is interpreter work around a tiny message (parent 16
bytes + count 4 bytes + 16 tokens x 4 bytes = 84 bytes, one BLAKE2b block), not
the hash itself. Here the chain runs as a C loop over a BLAKE2b written out
below (RFC 7693, unkeyed, 16-byte digest), with no Python object per block but
the hash it returns: the digest read as an unsigned big-endian int, made in C
(``_PyLong_FromByteArray``) while the digest bytes themselves chain on in a C
buffer.

Pure Python (:mod:`kvframe.core.hashing`) stays the reference: every function
here returns exactly what its Python counterpart returns (the hypothesis tests
in ``tests/core/test_hashing_compiled.py`` compare them, and the digest against
``hashlib.blake2b``). Nothing imports this module directly except
``hashing.py``, which falls back to Python when it is not built.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

cdef enum:
    DIGEST = 16  # bytes in a block hash (hashing.DIGEST_SIZE)
    BLOCK = 128  # BLAKE2b block bytes

cdef extern from *:
    """
    /* BLAKE2b compression (RFC 7693, section 3.2). The twelve rounds are
       written out so that every message-word index is a compile-time constant:
       the words then stay in registers (a loop over the rounds indexes them
       through the permutation table and runs ~1.5x slower). */
    #include <stdint.h>
    static const uint64_t kvf_blake2b_iv[8] = {
        0x6A09E667F3BCC908ULL, 0xBB67AE8584CAA73BULL, 0x3C6EF372FE94F82BULL,
        0xA54FF53A5F1D36F1ULL, 0x510E527FADE682D1ULL, 0x9B05688C2B3E6C1FULL,
        0x1F83D9ABFB41BD6BULL, 0x5BE0CD19137E2179ULL};
    static const uint8_t kvf_blake2b_sigma[12][16] = {
        {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
        {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
        {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
        {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
        {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
        {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
        {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
        {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
        {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
        {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
        {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
        {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};
    #define KVF_ROTR(x, n) (((x) >> (n)) | ((x) << (64 - (n))))
    #define KVF_G(r, i, a, b, c, d) do { \
        a = a + b + m[kvf_blake2b_sigma[r][2 * i]]; d = KVF_ROTR(d ^ a, 32); \
        c = c + d; b = KVF_ROTR(b ^ c, 24); \
        a = a + b + m[kvf_blake2b_sigma[r][2 * i + 1]]; d = KVF_ROTR(d ^ a, 16); \
        c = c + d; b = KVF_ROTR(b ^ c, 63); } while (0)
    #define KVF_ROUND(r) do { \
        KVF_G(r, 0, v[0], v[4], v[8], v[12]); KVF_G(r, 1, v[1], v[5], v[9], v[13]); \
        KVF_G(r, 2, v[2], v[6], v[10], v[14]); KVF_G(r, 3, v[3], v[7], v[11], v[15]); \
        KVF_G(r, 4, v[0], v[5], v[10], v[15]); KVF_G(r, 5, v[1], v[6], v[11], v[12]); \
        KVF_G(r, 6, v[2], v[7], v[8], v[13]); KVF_G(r, 7, v[3], v[4], v[9], v[14]); } while (0)

    static inline uint64_t kvf_load64(const uint8_t *p) {
        /* little-endian on every platform: identical hashes everywhere */
        return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16)
             | ((uint64_t)p[3] << 24) | ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40)
             | ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
    }

    /* t: bytes hashed so far including this block (messages here stay far
       below 2**64 bytes, so the high counter word is 0). */
    static void kvf_blake2b_compress(uint64_t h[8], const uint8_t *block, uint64_t t, int last) {
        uint64_t m[16], v[16];
        int i;
        for (i = 0; i < 16; i++) m[i] = kvf_load64(block + 8 * i);
        for (i = 0; i < 8; i++) { v[i] = h[i]; v[i + 8] = kvf_blake2b_iv[i]; }
        v[12] ^= t;
        if (last) v[14] = ~v[14];
        KVF_ROUND(0); KVF_ROUND(1); KVF_ROUND(2); KVF_ROUND(3);
        KVF_ROUND(4); KVF_ROUND(5); KVF_ROUND(6); KVF_ROUND(7);
        KVF_ROUND(8); KVF_ROUND(9); KVF_ROUND(10); KVF_ROUND(11);
        for (i = 0; i < 8; i++) h[i] ^= v[i] ^ v[i + 8];
    }
    """
    const uint64_t* kvf_blake2b_iv
    void kvf_blake2b_compress(uint64_t* h, const uint8_t* block, uint64_t t, int last) nogil

cdef extern from "Python.h":
    # The block hash: a digest's bytes as an unsigned big-endian int (what
    # ``int.from_bytes(digest)`` returns), without a Python call.
    object _PyLong_FromByteArray(const unsigned char* data, size_t n, int little_endian,
                                 int is_signed)


cdef void _blake2b16_parts(
    const uint8_t* head, Py_ssize_t head_len,
    const uint8_t* body, Py_ssize_t body_len,
    uint8_t* out,
) noexcept nogil:
    """BLAKE2b-128 (unkeyed) of ``head + body``, without joining them in memory."""
    cdef uint64_t h[8]
    cdef uint8_t buf[BLOCK]
    cdef Py_ssize_t total = head_len + body_len
    cdef Py_ssize_t filled = 0, take, pos = 0
    cdef uint64_t t = 0
    cdef int i
    for i in range(8):
        h[i] = kvf_blake2b_iv[i]
    h[0] ^= 0x01010000 ^ DIGEST
    # Feed head then body through a 128-byte buffer; the last block (possibly
    # partial, or the only empty one) is compressed with the final flag.
    while pos < total:
        if filled == BLOCK:
            t += BLOCK
            kvf_blake2b_compress(h, buf, t, 0)
            filled = 0
        if pos < head_len:
            take = head_len - pos
            if take > BLOCK - filled:
                take = BLOCK - filled
            memcpy(buf + filled, head + pos, take)
        else:
            take = total - pos
            if take > BLOCK - filled:
                take = BLOCK - filled
            memcpy(buf + filled, body + (pos - head_len), take)
        filled += take
        pos += take
    t += filled
    memset(buf + filled, 0, BLOCK - filled)
    kvf_blake2b_compress(h, buf, t, 1)
    for i in range(DIGEST):
        out[i] = <uint8_t>(h[i >> 3] >> (8 * (i & 7)))


def blake2b16(bytes message not None):
    """``hashlib.blake2b(message, digest_size=16).digest()``."""
    cdef uint8_t out[DIGEST]
    _blake2b16_parts(NULL, 0, <const uint8_t*>PyBytes_AS_STRING(message),
                     PyBytes_GET_SIZE(message), out)
    return PyBytes_FromStringAndSize(<char*>out, DIGEST)


cdef object _chain_into(object parent, bytes header, const uint8_t* data, Py_ssize_t size,
                        Py_ssize_t step, list target, object append, uint8_t* digests):
    """Hash each ``step``-byte slice of ``data`` after ``parent`` (an int hash; message:
    its 16 digest bytes | header | slice), appending each hash (an int) to ``target``
    (or calling ``append``), and each digest to ``digests`` when it is not NULL (room
    for one per slice); returns the last hash (``parent`` when ``data`` is empty)."""
    cdef uint8_t head[DIGEST + 4]
    cdef Py_ssize_t offset = 0, take
    cdef bytes parent_bytes
    if PyBytes_GET_SIZE(header) != 4:
        raise ValueError("header must be 4 bytes")
    if size <= 0:
        return parent
    parent_bytes = parent.to_bytes(DIGEST)  # OverflowError outside [0, 2**128)
    memcpy(head, PyBytes_AS_STRING(parent_bytes), DIGEST)
    memcpy(head + DIGEST, PyBytes_AS_STRING(header), 4)
    digest = parent
    while offset < size:
        take = size - offset
        if take > step:
            take = step
        _blake2b16_parts(head, DIGEST + 4, data + offset, take, head)
        digest = _PyLong_FromByteArray(head, DIGEST, 0, 0)
        if digests != NULL:
            memcpy(digests, head, DIGEST)
            digests += DIGEST
        if target is not None:
            PyList_Append(target, digest)
        else:
            append(digest)
        offset += take
    return digest


cdef class BlockChain:
    """``chain(parent, data, append)`` of :func:`kvframe.core.hashing._block_chain`:
    hash each ``block_size``-token block of the encoded ``data`` after ``parent``,
    appending each hash; returns the last (``parent`` if ``data`` is empty)."""

    cdef readonly Py_ssize_t block_size
    cdef bytes _header
    cdef Py_ssize_t _step

    def __init__(self, Py_ssize_t block_size, bytes header not None):
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.block_size = block_size
        self._header = header
        self._step = 4 * block_size

    def __call__(self, parent, bytes data not None, append):
        # A bound list.append (the hasher's own lists) is appended to in C.
        target = getattr(append, "__self__", None)
        if type(target) is not list or getattr(append, "__name__", None) != "append":
            target = None
        return _chain_into(parent, self._header, <const uint8_t*>PyBytes_AS_STRING(data),
                           PyBytes_GET_SIZE(data), self._step, target, append, NULL)


def hash_chunks(memo, tuple chunks not None, parent, BlockChain chain not None,
                list new_hashes not None):
    """:func:`kvframe.core.hashing._hash_chunks` in C: every whole chunk's hashes
    after ``parent``, from ``memo`` (a :class:`~kvframe.core.hashing.ChunkMemo`)
    where it has them, hashed and remembered otherwise; returns the last hash.

    The memo's ``get``/``put`` are done here on its own dicts and counters, with
    the same effect (same entries, generations and hit counts), so that a hit
    costs no Python call: its packed digests are made ints straight into
    ``new_hashes``.
    """
    chunk_bytes = chunks[3]
    cdef Py_ssize_t i, count, size
    cdef bytes data, packed
    cdef const unsigned char* raw
    cdef dict current
    for chunk_id in chunks[2]:
        key = (parent, chunk_id)
        current = memo.current
        found = current.get(key)
        if found is None:
            found = memo.previous.pop(key, None)
            if found is not None:
                _keep(memo, key, found)
        if found is None:
            memo.misses += 1
            data = chunk_bytes(chunk_id)
            if data is None:
                raise TypeError(f"chunk_bytes({chunk_id!r}) returned None, not bytes")
            size = PyBytes_GET_SIZE(data)
            packed = PyBytes_FromStringAndSize(NULL, DIGEST * ((size + chain._step - 1) // chain._step))
            parent = _chain_into(parent, chain._header, <const uint8_t*>PyBytes_AS_STRING(data),
                                 size, chain._step, new_hashes, None,
                                 <uint8_t*>PyBytes_AS_STRING(packed))
            _keep(memo, key, packed)
        else:
            memo.hits += 1
            packed = <bytes>found
            raw = <const unsigned char*>PyBytes_AS_STRING(packed)
            count = PyBytes_GET_SIZE(packed) // DIGEST
            for i in range(count):
                parent = _PyLong_FromByteArray(raw + i * DIGEST, DIGEST, 0, 0)
                PyList_Append(new_hashes, parent)
    return parent


cdef inline void _keep(object memo, object key, object packed) except *:
    """``ChunkMemo._keep``: into the current generation, which rotates when full."""
    cdef dict current = memo.current
    current[key] = packed
    if len(current) >= memo.capacity:
        memo.previous = current
        memo.current = {}
