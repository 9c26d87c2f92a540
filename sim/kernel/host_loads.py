"""Host-tier loads beside the steps (``--offload-loads async``), as vLLM's offloading connector runs them.

vLLM admits a request whose prefix hits are partly in host memory by giving it blocks for its hits and nothing
to compute (``WAITING_FOR_REMOTE_KVS``); its worker copies the host blocks in on a CUDA stream of its own while
steps run, and the scheduler schedules the request at the first step after the load is seen done. The requests
behind it are admitted meanwhile, and no step waits for the copy. Loads queue on that one stream: each starts
when its step does or when the load before it ends, whichever is later, so they finish in the order they start.

With prefix caching a loading request's blocks are cached only once its load is done (``delay_cache_blocks``),
and a request whose host hits include a block another load is bringing in is not loaded twice: it is skipped
(left in the queue, the requests behind it tried) until that load is done, when it hits those blocks on the GPU
(the connector's ``_blocks_being_loaded``). The host tier keeps the blocks being loaded (``being_loaded``, its
``pinned`` set) from eviction until their load lands, from the admission's lookup that finds them (`pinning`):
vLLM 0.33 holds the chunks a load reads (``v1/kv_offload/cpu/manager.py``: ``_prepare_load`` raises their
``ref_cnt``, which makes them non-evictable, and ``complete_load`` lowers it), SGLang HiCache the nodes it loads
(`allocators.host_tier`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

from sim.kernel.arrivals import ARRIVAL_TIE_S
from sim.kernel.sequence_group import SequenceGroup


class HostLoads:
    """The loads in flight, in the order they started (which is the order they finish)."""

    __slots__ = ("seconds_of", "_ready", "_hashes", "_started", "being_loaded", "free_at")

    def __init__(self, seconds_of: Callable[[int], float]) -> None:
        self.seconds_of = seconds_of  # a load of that many host blocks, in seconds (the cost model's swap-in)
        self._ready: dict[SequenceGroup, float] = {}
        self._hashes: dict[SequenceGroup, Sequence[int]] = {}  # the block hashes each load brings in
        self._started: dict[SequenceGroup, float] = {}  # when the step that started each load began
        self.being_loaded: set[int] = set()  # all of them
        self.free_at = -math.inf  # when the stream has copied every load started so far

    def __len__(self) -> int:
        return len(self._ready)

    def start(self, group: SequenceGroup, hashes: Sequence[int], now: float, blocks: int | None = None) -> None:
        """``group``'s load of the host blocks hashed ``hashes`` starts with the step that begins at ``now``.
        ``blocks``: the blocks it moves, where they are not ``hashes``' (a P/D fleet's remote prompt blocks,
        `sim.kernel.disaggregation`, pass no hashes: no other load can bring them in)."""
        self.free_at = max(now, self.free_at) + self.seconds_of(len(hashes) if blocks is None else blocks)
        self._ready[group] = self.free_at
        self._hashes[group] = hashes
        self._started[group] = now
        self.being_loaded.update(hashes)

    @contextmanager
    def pinning(self, hashes: Sequence[int]) -> Iterator[None]:
        """Count ``hashes`` as being loaded while the request that will load them is placed: the host tier pins
        them (``being_loaded`` is its ``pinned`` set, `sim.kernel.scheduler.Scheduler`) from the lookup that finds
        them, so the GPU blocks its allocation evicts, spilled to the host, take no host block it is about to
        read (a small host would otherwise give them those blocks). `start` then pins what the load brings in."""
        added = set(hashes).difference(self.being_loaded)
        self.being_loaded.update(added)
        try:
            yield
        finally:
            self.being_loaded.difference_update(added)

    def groups(self) -> Iterable[SequenceGroup]:
        """The groups loading, in the order their loads started."""
        return self._ready.keys()

    def overlaps(self, hashes: Sequence[int]) -> bool:
        """Whether a load in flight brings in any of ``hashes`` (a request hitting them waits for it)."""
        return bool(self.being_loaded) and not self.being_loaded.isdisjoint(hashes)

    def next_ready(self) -> float | None:
        """When the first load in flight ends (None: none in flight)."""
        return next(iter(self._ready.values()), None)

    def done(self, now: float, started_before: float = math.inf) -> list[SequenceGroup]:
        """Take out the groups whose loads ended by a step starting at ``now`` (within `ARRIVAL_TIE_S`, as an
        arrival is that step's), in the order they started; only those started by a step that began before
        ``started_before`` (async scheduling: a load is reported with the output of a step at or after the one
        that started it, `sim.kernel.async_outputs.InFlight.seen_loads`)."""
        done = []
        for group, ready in self._ready.items():
            if ready > now + ARRIVAL_TIE_S or self._started[group] >= started_before:
                break
            done.append(group)
        for group in done:
            del self._ready[group]
            del self._started[group]
            self.being_loaded.difference_update(self._hashes.pop(group))
        return done
