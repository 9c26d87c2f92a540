"""A design measurement, not kvsim code: what the Mooncake radix + host-tier run's page traffic would cost if
pages and hashes lived in numpy arrays end to end (issue 13's open speed item; `benchmarks/README.md`).

The run moves about 6 million pages in about 17,000 allocations of some 350 pages each: pop them from the free
queue's head, forget the prefix hashes they cached (spilling those to the host tier's LRU, which drops its
oldest), cache the new request's hashes on them, and later give the table back to the queue's tail. Here every
structure is an array indexed by page or by a dense hash id (ids assigned once at workload load), so each
allocation is a few whole-array operations instead of a Python operation per page. Left out: prefix lookups
(a gather and a search for the first miss), host hits and their touches, duplicate hashes, parked blocks; the
single-page decode path and the dense-id assignment are timed separately below.

    python benchmarks/sketch_numpy_pool.py
"""

from __future__ import annotations

import time

import numpy as np

GPU_PAGES, HOST_BLOCKS, BATCH, BATCHES, HELD = 50_000, 32_768, 350, 17_000, 60


def bulk_traffic() -> float:
    """Seconds for BATCHES allocations of BATCH pages through the array structures."""
    ids_total = BATCH * BATCHES + 1
    page_id = np.full(GPU_PAGES, -1, np.int64)  # page -> the dense id it caches
    gpu_of = np.full(ids_total, -1, np.int32)  # dense id -> its page on the GPU
    ref = np.zeros(GPU_PAGES, np.int32)
    queue = np.empty(GPU_PAGES + BATCH * BATCHES, np.int32)  # the free queue, head .. tail
    queue[:GPU_PAGES - 1] = np.arange(1, GPU_PAGES)
    head, tail = 0, GPU_PAGES - 1
    host_of = np.full(ids_total, -1, np.int32)  # dense id -> host block
    host_log = np.empty(BATCH * BATCHES, np.int64)  # offload order, oldest first
    log_head = log_tail = 0
    free_host = np.arange(HOST_BLOCKS, dtype=np.int32)
    held: list[np.ndarray] = []
    started = time.perf_counter()
    for k in range(BATCHES):
        pages = queue[head:head + BATCH]
        head += BATCH
        evicted = page_id[pages]
        evicted = evicted[evicted >= 0]
        gpu_of[evicted] = -1
        ref[pages] = 1
        n = len(evicted)
        if n:  # spill to the host, its oldest blocks making room
            take = min(n, len(free_host))
            blocks, free_host = free_host[:take], free_host[take:]
            if take < n:
                oldest = host_log[log_head:log_head + n - take]
                log_head += n - take
                blocks = np.concatenate([blocks, host_of[oldest]])
                host_of[oldest] = -1
            host_of[evicted] = blocks
            host_log[log_tail:log_tail + n] = evicted
            log_tail += n
        new = np.arange(k * BATCH, (k + 1) * BATCH)
        gpu_of[new] = pages
        page_id[pages] = new
        held.append(pages.copy())
        if len(held) > HELD:  # a request finishes: its table goes back, tail first
            table = held.pop(0)
            ref[table] = 0
            queue[tail:tail + BATCH] = table[::-1]
            tail += BATCH
    return time.perf_counter() - started


def single_pages(count: int = 230_000) -> float:
    """Seconds for ``count`` decode-growth pops of one page each (numpy scalar access)."""
    page_id = np.full(GPU_PAGES, -1, np.int64)
    gpu_of = np.full(count, -1, np.int32)
    ref = np.zeros(GPU_PAGES, np.int32)
    started = time.perf_counter()
    for i in range(count):
        p = i % GPU_PAGES
        h = page_id.item(p)
        if h >= 0:
            gpu_of[h] = -1
        page_id[p] = i
        gpu_of[i] = p
        ref[p] = 1
    return time.perf_counter() - started


def dense_ids(count: int = 9_000_000) -> float:
    """Seconds to give ``count`` 63-bit block hashes (a third repeated) dense ids with one sort."""
    hashes = np.random.default_rng(0).integers(0, 2**63 - 1, size=count, dtype=np.int64)
    hashes[::3] = hashes[1::3][:len(hashes[::3])]
    started = time.perf_counter()
    np.unique(hashes, return_inverse=True)
    return time.perf_counter() - started


if __name__ == "__main__":
    bulk = bulk_traffic()
    pages = BATCH * BATCHES
    print(f"bulk: {bulk:.2f} s for {pages / 1e6:.2f} M pages ({bulk / pages * 1e9:.0f} ns a page)")
    single = single_pages()
    print(f"single pages: {single:.2f} s for 230,000 ({single / 230_000 * 1e9:.0f} ns a page)")
    print(f"dense ids: {dense_ids():.2f} s for 9,000,000 hashes")
