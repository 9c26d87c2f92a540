"""The request record: everything the simulator needs to know about one request, and nothing more.

Prefix identity is a session (``session_id``: the request is a turn of a multi-turn conversation, a prefix
of its session's one token stream, `workloads.sessions`), or a list of block hashes at the trace's own
granularity (``prefix_hashes``, each covering ``prefix_hash_tokens`` prompt tokens, as Mooncake's 512-token
``hash_ids``), or a shared-prefix group (``prefix_group``, its first ``prefix_len`` prompt tokens identical
across the group, e.g. a system prompt). `Request.block_hashes` turns any of them into chained hashes of full
blocks at the simulator's block size.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache
from math import gcd

import numpy as np

from workloads.errors import is_whole_number, show_value
from workloads.hashing import mix, mix_array
from workloads.validation import record_problem

_HASHES_SEED = 0x6B7673696D2D6873
"""Namespace of identities built from ``prefix_hashes`` (distinct from group identities)."""
_GROUP_SEED = 0x6B7673696D2D6770
"""Namespace of identities built from ``prefix_group``."""
_SESSION_SEED = 0x6B7673696D2D7373
"""Namespace of identities built from ``session_id``."""
_UNIT_BASE = 1 << 61
"""Where the block ids built from dense unit ids start (`Request.block_hashes` with ``units``): below the
simulator's own-block ids (``1 << 62``), inside the 63-bit range of content hashes, where a collision with a
content hash is as unlikely as between two of them."""
_chain_mix = lru_cache(maxsize=1 << 17)(mix)
"""`mix` remembered for the chains of ``prefix_hashes``: the turns of a conversation repeat their parents'
units, so most links of a chain were computed for an earlier request (a lookup instead of 8 big-int ops)."""

_WHOLE_NUMBERS = ("id", "prompt_tokens", "output_tokens", "max_tokens", "n", "beam_width", "prefix_hash_tokens",
                  "prefix_group", "prefix_len", "session_id", "turn")
"""The fields that are counts or ids: a float in one (``prompt_tokens=100.5``) is refused, not truncated later."""


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a workload. Token counts are per sequence; ``n`` parallel samples or a beam of
    ``beam_width`` share the prompt and each produce ``output_tokens``."""

    id: int
    arrival_time_s: float
    prompt_tokens: int
    output_tokens: int
    max_tokens: int | None = None
    n: int = 1
    beam_width: int = 1
    prefix_hashes: tuple[int, ...] = ()
    prefix_hash_tokens: int = 512
    prefix_group: int | None = None
    prefix_len: int = 0
    session_id: int | None = None
    turn: int = 0
    think_time_s: float | None = None

    def __post_init__(self) -> None:
        """The checks a trace row gets (`workloads.validation`, and the readers' parsing rules that apply to a
        record of Python values), so that a `Request` built by hand is held to what a file is."""
        for name in _WHOLE_NUMBERS:
            value = getattr(self, name)
            if value is None or isinstance(value, int) and not isinstance(value, bool):
                continue
            if not is_whole_number(value):
                raise ValueError(f"request {self.id}: {name}: must be a whole number (got {show_value(value)})")
            object.__setattr__(self, name, int(value))  # 100.0 is 100, as in a trace file
        nan = float("nan")
        record = {"prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
                  "max_tokens": nan if self.max_tokens is None else self.max_tokens, "n": self.n,
                  "beam_width": self.beam_width,
                  "prefix_group": nan if self.prefix_group is None else self.prefix_group,
                  "prefix_len": self.prefix_len, "hash_counts": len(self.prefix_hashes)}
        if (problem := record_problem(record, self.prefix_hash_tokens)) is not None:
            raise ValueError(f"request {self.id}: {problem}")
        if self.prefix_len > 0 and self.prefix_group is None:  # the readers' rule: nothing would share it
            raise ValueError(f"request {self.id}: prefix_len: given without prefix_group")

    @classmethod
    def checked(cls, *values: object) -> Request:
        """A request from field values (in field order) that `workloads.validation` already passed as
        columns (`Workload`): the per-record check would cost more than building the record itself."""
        request = object.__new__(cls)
        for slot, value in zip(_SLOTS, values, strict=True):
            slot.__set__(request, value)
        return request

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens

    @property
    def num_seqs(self) -> int:
        """Sequences the request runs as once decoding starts (samples or beams)."""
        return max(self.n, self.beam_width)

    @property
    def known_prefix_tokens(self) -> int:
        """How many leading tokens have a known identity: a session turn's all, its generated tokens too (the
        next turn's prompt repeats them); else the prompt tokens the hashes cover, else the group's prefix."""
        if self.session_id is not None:
            return self.prompt_tokens + self.output_tokens
        if self.prefix_hashes:
            return min(len(self.prefix_hashes) * self.prefix_hash_tokens, self.prompt_tokens)
        return self.prefix_len if self.prefix_group is not None else 0

    def block_hashes(self, block_size: int, units: np.ndarray | None = None,
                     lookahead: bool = False) -> tuple[int, ...]:
        """Chained hashes of the full blocks of ``block_size`` tokens whose identity is known: the prompt's, and
        for a session turn its generated tokens' too. ``units``: dense ids of this request's chained
        ``prefix_hashes`` units within its workload (`Workload.prefix_units`), if the caller has them.
        ``lookahead`` (``prefix_hashes`` only): each block is hashed with the token after it, as vLLM hashes
        blocks for a model-based speculative drafter (``num_hash_lookahead_tokens`` 1), so a block ending where a
        unit ends is shared only by prompts whose next units are too (the trace cannot say whether two different
        units start with the same token: they are taken to differ), and one ending where the known tokens end
        has no hash.

        Two requests get equal hashes for block ``j`` exactly when their first ``(j + 1) * block_size`` tokens
        are known to be equal, so a hash stands for the block *and everything before it* (vLLM's chained
        block hash). Identity comes from ``prefix_hashes`` when present, else from ``prefix_group``::

            prefix_hashes (unit H=512):  | h0 ............ | h1 ............ | h2 ..(partial)  |prompt end
            blocks (B=16):               |b0|b1|...              ...  |bk| (a block past the prompt end,
                                                                             or crossing it, is not known)

        Each unit's content is chained to its parents (``c_u = mix(c_{u-1}, h_u)``), and block ``j``, which
        ends at token ``e = (j + 1) * B`` inside unit ``u``, hashes ``(c_u, e - u * H)``: the prefix up to ``e``
        is unit ``u`` with all its parents plus ``e - u * H`` of its tokens. This handles B < H (sub-block k of
        hash h) and B > H (a block spanning several units) alike, and vectorises over blocks. The last unit of
        a request usually covers only up to the prompt length, so only blocks fully inside
        ``known_prefix_tokens`` get a hash.

        Given ``units`` (``d_u``, one dense id per distinct ``c_u`` of the workload), the same pair is numbered
        instead of mixed: ``_UNIT_BASE + d_u * (H / g) + (e - u * H) / g`` with ``g = gcd(B, H)``, so equal
        pairs still get equal ids and unequal ones unequal ids, and a unit's blocks get consecutive ones. Why:
        the simulator's caches key dicts by these ids, and a chain of consecutive ints fills consecutive slots
        of a dict's table where random 63-bit hashes scatter over it (about a tenth of a Mooncake run with a
        host tier, `benchmarks/README.md`). The ids mean nothing outside the workload that numbered them.

        A session turn's block ending at token ``e`` hashes ``(session, e)``: every turn is a prefix of its
        session's token stream. Blocks inside a shared system prompt (``prefix_group``, ``prefix_len``) keep the
        group's hashes, so sessions share those blocks with each other and with requests outside sessions.
        """
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        num_blocks = self.known_prefix_tokens // block_size
        if num_blocks == 0:
            return ()
        ends = np.arange(1, num_blocks + 1, dtype=np.int64) * block_size
        if self.session_id is not None:
            shared = ends <= (self.prefix_len if self.prefix_group is not None else 0)
            own = mix_array(mix(_SESSION_SEED, self.session_id), ends)
            hashed = np.where(shared, mix_array(mix(_GROUP_SEED, self.prefix_group or 0), ends), own)
        elif self.prefix_hashes:
            unit_size = self.prefix_hash_tokens
            if lookahead:  # block j is known by the prefix one token past its end
                ends = ends[ends < self.known_prefix_tokens] + 1
                if not len(ends):
                    return ()
            at = (ends - 1) // unit_size  # the unit each block ends in
            if units is not None:
                g = gcd(block_size, unit_size) if not lookahead else 1
                ids = units[at].astype(np.int64) * (unit_size // g) + (ends - at * unit_size) // g + _UNIT_BASE
                return tuple(ids.tolist())
            links = [0] * (int(at[-1]) + 1)
            parent = _HASHES_SEED
            for u in range(len(links)):
                parent = links[u] = _chain_mix(parent, self.prefix_hashes[u])
            hashed = mix_array(np.array(links, dtype=np.uint64)[at], ends - at * unit_size)
        else:
            hashed = mix_array(mix(_GROUP_SEED, self.prefix_group), ends)
        hashed >>= np.uint64(1)
        return tuple(hashed.tolist())


_SLOTS = tuple(getattr(Request, f.name) for f in fields(Request))
"""The slot of each field, in field order (how `Request.checked` fills a record without re-checking it)."""


def prefix_chains(offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The chained units ``c_u`` (`Request.block_hashes`) of every request of a ragged ``prefix_hashes``
    column (Arrow layout: request ``i`` holds ``values[offsets[i]:offsets[i + 1]]``), aligned with ``values``,
    as uint64. Why: one request at a time, a link never seen before is a `mix` of Python ints (about 1 us,
    most links of the Mooncake trace), a third of building its hashes; here link ``u`` of every request that
    long is one numpy pass, so a workload's chains cost a few hundred passes."""
    chains = np.empty(len(values), np.uint64)
    lengths = np.diff(offsets)
    rows = np.flatnonzero(lengths)
    at, left = offsets[:-1][rows].astype(np.int64), lengths[rows]
    link = np.full(len(rows), _HASHES_SEED, np.uint64)
    while len(at):
        link = mix_array(link, values[at])
        chains[at] = link
        at, left = at + 1, left - 1
        going = left > 0
        at, left, link = at[going], left[going], link[going]
    return chains



def prefix_units(offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Dense ids (``0 ..`` distinct units - 1, int64) of the chained units of a ragged ``prefix_hashes`` column,
    aligned with ``values``: equal ids exactly where `prefix_chains` gives equal ``c_u`` (the same unit after
    the same parents), for `Request.block_hashes`'s ``units``. One sort of the column (0.02 s for the
    Mooncake trace's 288,500 units)."""
    return np.unique(prefix_chains(offsets, values), return_inverse=True)[1].astype(np.int64).reshape(-1)
