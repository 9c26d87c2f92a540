"""Hypothesis drives the hybrid pool of an attention/Mamba-2 model (Nemotron-H) as vLLM 0.33's scheduler does, in
both of its Mamba cache modes: ``"none"`` (prefix caching off: one state block per sequence per Mamba group) and
``"align"`` (prefix caching on: block-aligned states, a prefix hit resumed at a cached state, checkpoints at the
replay boundary and at a shared-prefix junction, a hit on a state cached in the step being scheduled deferred),
synchronous and with async scheduling (frees by the tokens processed, `HybridPagedAllocator.begin_step`); in
align mode with Mamba-1 layers (Jamba), which export no state from inside a prefill (``mamba_checkpoints`` False);
and in align mode with ngram speculative decoding (``spec`` k: decode steps verify up to k drafts, given slots and
state columns, `HybridPagedAllocator.grow_with_drafts`; a table k columns longer than the attention ones with k more
live blocks after the running one, `mamba_align.place_blocks`).

`MambaMachine` schedules as `sim.kernel` does: steps (``new_step``, and ``begin_step`` under async scheduling), each
request scheduled at most once a step, prefill chunks cut by `aligned_split` (align mode) after a budget, a
request's shared-prefix junction looked up when it is admitted, decode steps of one token and the decode
fast-forward's growth by the headroom, finished requests freed, and preempted ones freed and resumed later with
their output replayed as prefill. Blocks are 4 tokens so that boundaries are crossed all the time; two or three
Mamba groups after one or two attention groups; prompts of a few prefixes so that hits, junctions and deferrals
happen. After every rule the allocator's audit runs, and the machine checks vLLM's rules from the outside
(``MambaManager``, ``v1/core/single_type_kv_cache_manager.py``): a sequence holds exactly one state block per Mamba
group in none mode, at most three live (four under async scheduling, five there
under a positive or dense retention interval) in align mode with its running state in its
last column and every Mamba group alike; the used blocks are the distinct blocks the tables hold and the cached
slots the free blocks keeping a hash; no headroom while a state block waits to be freed; a hit never covers the
last token looked up, and resumes at a cached state; only states at a request's replay boundary or junction are
cached (and, under a positive ``prefix_cache_retention_interval``, those ending each interval), and a hit on one
cached in the step being scheduled is deferred; a chunk that can export its checkpoint holds a block for it (the
prefill's last chunk under retention 0, any such chunk under a positive interval or dense retention, None, where
every full state may be cached; Mamba-1: none, and no chunk runs past its prompt's last cacheable boundary); the
decode fast-forward's growth
by the headroom takes and frees nothing; a refused growth only frees states no step reads.
"""

from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from allocators.base import cdiv
from allocators.hybrid import HybridPagedAllocator
from allocators.mamba_align import aligned_split, checkpoint_position, checkpoint_valid
from tests.allocators.kv_group_fixture import KVGroupFixture
from tests.allocators.test_allocator_stateful import SETTINGS, chained_hashes
from tests.soak import examples, steps

BLOCK = 4
MAX_LEN = 64
PROMPTS = (9, 14, 21, 30)  # prompts that recur, so that one resumes at the state another cached
ATTENTION = {  # Nemotron-H's one attention group, and a model whose attention layers make two
    1: (KVGroupFixture("full", "full", 4, None, 100),),
    2: (KVGroupFixture("full", "full", 4, None, 100), KVGroupFixture("other", "full", 4, None, 100)),
}


@dataclass
class Request:
    """What the scheduler knows of a request: its prompt, the tokens its prefill reaches (the prompt, or after a
    preemption the prompt and its output, replayed), its final length, its block hashes (prompt and output) and
    the shared-prefix junction its admission looked up."""

    prompt: int
    target: int
    final: int
    hashes: tuple[int, ...]
    junction: int = 0


class MambaMachine(RuleBasedStateMachine):
    prefix_caching = False  # True: vLLM's mamba_cache_mode 'align'
    async_scheduling = False
    retention: int | None = 0  # vLLM's prefix_cache_retention_interval (align mode), a multiple of BLOCK or None
    exports = True  # False: Mamba-1 layers (Jamba), which export no state from inside a prefill (no checkpoint block)
    spec = 0  # vLLM's num_speculative_blocks (align mode): decode steps verify up to that many drafts

    @initialize(blocks=st.integers(8, 60), mamba=st.integers(2, 3), attention=st.sampled_from([1, 2]),
                budget=st.sampled_from([3, 4, 8, 16, 64]))
    def build(self, blocks, mamba, attention, budget):
        self.alloc = HybridPagedAllocator(blocks * BLOCK, block_size=BLOCK, max_model_len=MAX_LEN,
                                          kv_groups=ATTENTION[attention], mamba_groups=mamba,
                                          prefix_caching=self.prefix_caching,
                                          prefix_cache_retention_interval=self.retention,
                                          mamba_checkpoints=self.exports, mamba_state_blocks=1 + self.spec)
        self.alloc.processed_basis = self.async_scheduling  # as `sim.kernel.replica.build_replica` sets it
        self.budget = budget
        self.tokens: dict[int, int] = {}
        self.requests: dict[int, Request] = {}
        self.preempted: list[Request] = []
        self.scheduled: set[int] = set()  # sequences scheduled in this step
        self.cache: dict[int, set[int]] = {}  # each cached key's blocks, as the last rule left them
        self.step_cached: set[int] = set()  # the keys cached (anew, or into another block) in this step
        self.reachable: set[int] = set()  # the Mamba keys a later request can resume at: admissions' boundaries
        self.next_id = 0
        self.step()

    # -- helpers ---------------------------------------------------------------------------------------
    def snapshot(self):
        a = self.alloc
        return (a.breakdown(), a.memory_map().tobytes(), a.free_block_ids(),
                {seq: a.block_tables(seq) for seq in self.tokens})

    def cached_blocks(self) -> dict[int, set[int]]:
        """Each cached key's blocks: a key may be cached in several (two requests computed the same state, as
        vLLM's block pool keeps them), so one of them evicted is no new caching."""
        out: dict[int, set[int]] = {}
        for b, h in enumerate(self.alloc._cache.block_hash):
            if h is not None:
                out.setdefault(h, set()).add(b)
        return out

    def chunk(self, r: Request, start: int) -> int:
        """The scheduler's chunk from ``start``: what the budget allows, block-aligned in align mode
        (`sim.kernel.mamba_split.MambaSplit.split`)."""
        num_new = min(self.budget, r.target - start)
        if not self.alloc.align:
            return num_new
        return aligned_split(start, num_new, prompt=r.prompt, num_tokens=r.target, junction=r.junction,
                             block_size=BLOCK, max_prefill=self.budget, checkpoints=self.exports)

    def mamba_tables(self, seq):
        return [t for t, m in zip(self.alloc.block_tables(seq), self.alloc.mamba, strict=True) if m]

    def attention_tables(self, seq):
        return [t for t, m in zip(self.alloc.block_tables(seq), self.alloc.mamba, strict=True) if not m]

    def unscheduled(self, prefilling: bool):
        return sorted(seq for seq, n in self.tokens.items()
                      if seq not in self.scheduled and (n < self.requests[seq].target) == prefilling)

    # -- the scheduler's calls -------------------------------------------------------------------------
    @rule()
    def step(self):
        """A step is being scheduled: under async scheduling the pool remembers where each sequence stood
        (`begin_step`), then states cached before it may be hit (`new_step`)."""
        if self.async_scheduling:
            self.alloc.begin_step()
        self.alloc.new_step()
        self.scheduled.clear()
        self.step_cached.clear()

    @rule(num=st.one_of(st.sampled_from(PROMPTS), st.integers(1, 40)), extra=st.integers(1, 20),
          prefix=st.sampled_from([None, 1, 2, 3]), reserve_full=st.booleans())
    def admit(self, num, extra, prefix, reserve_full):
        """A new request: no hashes (``prefix`` None) or those of one of three prefixes, shared block by block."""
        hashes = chained_hashes(prefix, (num + extra) // BLOCK) if prefix is not None else ()
        self._admit(Request(num, num, min(num + extra, MAX_LEN), hashes), reserve_full)

    @precondition(lambda self: self.async_scheduling and self.prefix_caching)
    @rule(num=st.sampled_from(PROMPTS), prefix=st.sampled_from([1, 2, 3]))
    def admit_with_tails_hidden(self, num, prefix):
        """Under async scheduling the decoders scheduled in this step, whose last token is in flight, have their
        just filled last block uncached while waiting requests are admitted, and cached again after
        (`sim.kernel.scheduler.Scheduler.plan_step`: ``hide_shared_tails``, ``show_tails``)."""
        decoders = sorted(seq for seq in self.scheduled if self.tokens[seq] > self.requests[seq].target)
        hidden = [seq for seq in decoders if self.alloc.hide_shared_tail(seq)]
        self._admit(Request(num, num, num + 4, chained_hashes(prefix, (num + 4) // BLOCK)), False)
        for seq in hidden:
            self.alloc.cache_blocks(seq)

    @precondition(lambda self: self.preempted)
    @rule(data=st.data(), reserve_full=st.booleans())
    def resume(self, data, reserve_full):
        """A preempted request admitted again: its prompt and output are its prefill now."""
        r = self.preempted[data.draw(st.integers(0, len(self.preempted) - 1))]
        if self._admit(r, reserve_full):
            self.preempted.remove(r)

    def _admit(self, r: Request, reserve_full: bool) -> bool:
        """``place_first_chunk``: the hit looked up over the prefill, the junction with it, the first chunk split
        from the hit; admitted for the hit and that chunk (with ``reserve_full``, only if the whole prefill
        fits, ``scheduler_reserve_full_isl``)."""
        a = self.alloc
        if a.never_fits(r.target, final_tokens=r.final):
            return False
        cached = a.num_cached_tokens(r.hashes, r.target)
        assert cached % BLOCK == 0 and cached <= min(r.target - 1, len(r.hashes) * BLOCK), "hit past the prompt"
        assert self.prefix_caching or cached == 0
        r.junction = a.shared_prefix_boundary(r.hashes, r.target)
        assert r.junction == 0 or cached < r.junction <= r.target - 1
        chunk = self.chunk(r, cached)
        if not chunk:
            return False
        seq, before = self.next_id, self.snapshot()
        key = r.hashes[cached // BLOCK - 1] * len(a.groups) + len(a.groups) - 1 if cached else None
        fresh = a.align and key in self.step_cached  # vLLM defers a hit on a state cached in this step
        adm = a.admit(seq, cached + chunk, final_tokens=r.final, block_hashes=r.hashes,
                      full_tokens=r.target if reserve_full else None, prompt_tokens=r.prompt,
                      request_tokens=r.target)
        if adm is None:
            assert self.snapshot() == before, "a refused admission changed the pool"
            return False
        assert not fresh, "a hit on a state cached in this step was not deferred"
        self.next_id += 1
        assert adm.cached_tokens == cached
        n = len(a.groups)
        for g, table in enumerate(a.block_tables(seq) if cached else ()):  # the hit's blocks: the cached ones
            for i in range(cached // BLOCK - 1 if a.mamba[g] else 0, cached // BLOCK):  # a state: only its last
                assert a._cache.block_hash[table[i]] == r.hashes[i] * n + g, f"group {g}: hit block {i} is not cached"
        columns = [boundary // BLOCK - 1 for boundary in (r.prompt - 1, r.junction)]  # replay boundary, junction
        if self.retention is None:  # dense: every state
            columns += range(len(r.hashes))
        elif self.retention:  # and the state ending every interval
            columns += [i for i in range(len(r.hashes)) if (i + 1) % (self.retention // BLOCK) == 0]
        for column in columns:
            if 0 <= column < len(r.hashes):
                self.reachable.update(r.hashes[column] * n + g for g, m in enumerate(a.mamba) if m)
        self.requests[seq] = r
        self.tokens[seq] = cached + chunk
        self.caches_boundary(seq, cached)
        self.checkpoints(seq, cached)
        self.scheduled.add(seq)
        return True

    @precondition(lambda self: self.unscheduled(prefilling=True))
    @rule(data=st.data())
    def prefill_chunk(self, data):
        seq = data.draw(st.sampled_from(self.unscheduled(prefilling=True)))
        chunk = self.chunk(self.requests[seq], self.tokens[seq])
        if chunk:
            self._extend(seq, chunk, self.alloc.grow_chunk)

    @precondition(lambda self: self.unscheduled(prefilling=False))
    @rule(data=st.data())
    def decode(self, data):
        seq = data.draw(st.sampled_from(self.unscheduled(prefilling=False)))
        if self.spec:  # a verification: the fed token, and drafts given slots and state columns (all rejected)
            drafts = data.draw(st.integers(0, self.spec))
            self._extend(seq, 1, lambda s, n: self.alloc.grow_with_drafts(s, n, drafts))
            return
        self._extend(seq, 1, self.alloc.grow)

    def _extend(self, seq, n, call):
        """A step's growth; refused, it still frees the states no step reads (vLLM's ``remove_skipped_blocks``
        comes before the room check) and changes nothing else, and tried again changes nothing at all."""
        tables = self.alloc.block_tables(seq)
        self.scheduled.add(seq)
        if call(seq, n) is not None:
            self.tokens[seq] += n
            if not self.alloc.align:  # a state block for the sequence's life
                assert self.mamba_tables(seq) == [t for t, m in zip(tables, self.alloc.mamba, strict=True) if m]
            self.caches_boundary(seq, self.tokens[seq] - n)
            self.checkpoints(seq, self.tokens[seq] - n)
            return
        assert self.alloc.num_tokens(seq) == self.tokens[seq]
        assert self.attention_tables(seq) == [t for t, m in zip(tables, self.alloc.mamba, strict=True) if not m]
        for now, was in zip(self.mamba_tables(seq), (t for t, m in zip(tables, self.alloc.mamba, strict=True) if m),
                            strict=True):
            assert len(now) == len(was) and all(b in (0, w) for b, w in zip(now, was, strict=True)), \
                "a refused growth changed a state table other than by freeing"
        before = self.snapshot()
        assert call(seq, n) is None and self.snapshot() == before

    def caches_boundary(self, seq, start):
        """A prompt's prefill from ``start`` that passed its replay boundary (the last block boundary before its
        last token) cached the state there in every Mamba group (align mode): the split ends a chunk there, or
        the chunk reaching the prompt's end exports it into its checkpoint block. A resumed request's chunks
        stop at its replay's boundary instead, and a fork's child has no hashes: not checked."""
        a, r = self.alloc, self.requests[seq]
        boundary = (r.prompt - 1) // BLOCK * BLOCK
        if not a.align or r.target != r.prompt or not 0 < boundary <= len(r.hashes) * BLOCK:
            return
        if start < boundary <= self.tokens[seq]:
            n, get = len(a.groups), a._cache.getter
            assert all(get(r.hashes[boundary // BLOCK - 1] * n + g) is not None for g, m in enumerate(a.mamba) if m), \
                f"sequence {seq}: the state at its replay boundary {boundary} is not cached"

    def checkpoints(self, seq, start):
        """A chunk from ``start`` that can export the state one block before its end into a block of its own
        (`mamba_align.checkpoint_valid`) holds it there, in every Mamba group (align mode): under retention 0 only
        the chunk reaching the prefill's end, under a positive interval or None any such chunk (vLLM's coordinator
        passes ``prefill_end`` 0 then). Mamba-1 layers export none: a chunk never runs past its prompt's last
        cacheable boundary, and holds no block before its running one's."""
        a, r, end = self.alloc, self.requests[seq], self.tokens[seq]
        if a.align and not self.exports and start < checkpoint_position(r.target, BLOCK):
            assert end <= checkpoint_position(r.target, BLOCK), f"sequence {seq}: chunk {start}..{end} runs past " \
                "its last cacheable boundary"
            assert not any(t[cdiv(end, BLOCK) - 2] for t in self.mamba_tables(seq) if cdiv(end, BLOCK) >= 2
                           and cdiv(end, BLOCK) - 2 > (start - 1) // BLOCK), \
                f"sequence {seq}: chunk {start}..{end} holds a checkpoint block"
            return
        if not a.align or not checkpoint_valid(start, end, checkpoint_position(end, BLOCK), BLOCK):
            return
        if self.retention != 0 or end >= max(r.prompt, r.target - 1):
            assert all(t[cdiv(end, BLOCK) - 2] for t in self.mamba_tables(seq)), \
                f"sequence {seq}: chunk {start}..{end} holds no checkpoint block"

    @precondition(lambda self: self.unscheduled(prefilling=False))
    @rule(data=st.data())
    def fast_forward(self, data):
        """The decode fast-forward grows a decoder by its headroom: no allocator work (no block taken or freed),
        which align mode allows only while the sequence holds one state (the next free is a step's work)."""
        seq = data.draw(st.sampled_from(self.unscheduled(prefilling=False)))
        room = min(self.alloc.headroom(seq), MAX_LEN - self.tokens[seq])
        if room:
            used = self.alloc.breakdown().used_blocks
            tables = self.alloc.block_tables(seq)
            assert self.alloc.grow(seq, room) == ()
            assert self.alloc.breakdown().used_blocks == used and self.alloc.block_tables(seq) == tables
            self.tokens[seq] += room
            self.scheduled.add(seq)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), preempt=st.booleans())
    def free(self, data, preempt):
        """A request finished, or preempted (recomputed later: its output joins its prefill)."""
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        a = self.alloc
        held = {b for t in a.block_tables(seq) for b in t if b}
        released = sum(1 for b in held if a.ref_count(b) == 1)
        used = a.breakdown().used_blocks
        assert sum(a.live_blocks(seq)) == len(held)
        assert a.free(seq) == len(held) * BLOCK
        assert a.breakdown().used_blocks == used - released
        tokens = self.tokens.pop(seq)
        r = self.requests.pop(seq)
        self.scheduled.discard(seq)
        if preempt:  # its output (the token sampled after its last computed one too) replayed as prefill
            target = tokens + 1 if tokens >= r.target else r.target
            self.preempted.append(Request(r.prompt, target, max(r.final, target), r.hashes))

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def fork(self, data):
        """A copy of a sequence (the allocator's fork: every live block copied, a state table's nulls kept), as
        a request sampled more than once is forked (`sim.kernel.parallel_sampling`)."""
        parent = data.draw(st.sampled_from(sorted(self.tokens)))
        child, before = self.next_id, self.snapshot()
        copies = self.alloc.fork(parent, child, final_tokens=self.requests[parent].final)
        if copies is None:
            assert self.snapshot() == before
            return
        self.next_id += 1
        assert len(copies) == sum(self.alloc.live_blocks(parent))
        r = self.requests[parent]
        self.requests[child] = Request(r.prompt, r.target, r.final, ())
        self.tokens[child] = self.tokens[parent]
        if parent in self.scheduled:  # made as its parent was scheduled: computed with it in this step
            self.scheduled.add(child)

    # -- vLLM's rules, checked after every rule --------------------------------------------------------
    @invariant()
    def consistent(self):
        if not hasattr(self, "alloc"):
            return
        a = self.alloc
        a.check_invariants()
        cache = self.cached_blocks()
        self.step_cached.update(k for k, blocks in cache.items() if not blocks <= self.cache.get(k, set()))
        self.cache = cache
        assert all(k in self.reachable for k in cache if a.mamba[k % len(a.groups)]), "a state cached out of reach"
        b = a.breakdown()
        assert b.token_states + b.reservation + b.internal_frag + b.external_frag + b.free == a.capacity
        held = set()
        limit = 3 + self.spec + (self.async_scheduling and 1 + (self.retention != 0))  # as `audit_hybrid` bounds them
        for seq, tokens in self.tokens.items():
            assert a.num_tokens(seq) == tokens
            length = cdiv(tokens, BLOCK)
            attention = self.attention_tables(seq)  # with drafts, their blocks held past the tokens too
            assert all((len(t) == length or self.spec and len(t) > length) and all(t) for t in attention)
            states = self.mamba_tables(seq)
            if a.align:
                live = [sum(1 for x in t if x) for t in states]
                assert all(len(t) == len(attention[0]) + self.spec and t[-1] for t in states), \
                    f"sequence {seq}: no running state, or not {self.spec} speculative blocks after it"
                assert 1 <= live[0] <= limit, f"sequence {seq}: {live[0]} live state blocks"
                assert len({tuple(x == 0 for x in t) for t in states}) == 1, "Mamba groups hold different columns"
                if live[0] > 1:
                    assert a.headroom(seq) == 0, f"sequence {seq}: headroom while a state free is pending"
            else:
                assert all(len(t) == 1 and t[0] for t in states), f"sequence {seq}: not one state block a group"
            held.update(x for t in a.block_tables(seq) for x in t if x)
        assert b.used_blocks == len(held), "used blocks are not the blocks the tables hold"
        free = a.free_block_ids()
        assert len(free) + len(held) == a.num_usable_blocks and not held & set(free)
        assert b.cached == BLOCK * sum(1 for x in free if a._cache.block_hash[x] is not None)

    def teardown(self):
        if not hasattr(self, "alloc"):
            return
        for seq in list(self.tokens):
            self.alloc.free(seq)
        self.alloc.check_invariants()
        b = self.alloc.breakdown()
        assert b.token_states == b.reservation == b.internal_frag == b.used_blocks == b.shared_saved == 0


for _pc, _async, _retention, _exports, _spec in (
        (False, False, 0, True, 0), (True, False, 0, True, 0), (True, True, 0, True, 0),
        (True, False, 2 * BLOCK, True, 0), (True, True, 3 * BLOCK, True, 0),
        (True, False, None, True, 0), (True, True, None, True, 0),
        (True, False, 0, False, 0), (True, True, 0, False, 0),
        (True, False, 2 * BLOCK, False, 0),
        (True, False, 0, True, 2), (True, False, 2 * BLOCK, True, 3)):  # align mode's speculative blocks
    _label = (f"{'align' if _pc else 'none'}{'_async' if _async else ''}"
              f"{'_dense' if _retention is None else f'_retention_{_retention}' * bool(_retention)}"
              f"{'_mamba1' * (not _exports)}{f'_spec_{_spec}' * bool(_spec)}")
    _machine = type(f"MambaMachine_{_label}", (MambaMachine,),
                    {"prefix_caching": _pc, "async_scheduling": _async, "retention": _retention,
                     "exports": _exports, "spec": _spec})
    globals()[f"Test_mamba_{_label}"] = settings(SETTINGS, max_examples=examples(25),
                                                  stateful_step_count=steps(60))(_machine).TestCase
