"""vLLM v1's speculative decoding with the ``ngram``, ``eagle``, ``eagle3`` and ``mtp`` drafters: what it does to
the schedule and the KV cache.

Read from vLLM 0.33 (``vllm/v1/core/sched/scheduler.py``, ``vllm/v1/core/kv_cache_manager.py``,
``vllm/config/speculative.py``, ``vllm/config/vllm.py``):

- After every step that samples a token for a request (its prefill's last chunk, or a decode), the drafter
  proposes ``num_speculative_tokens`` draft tokens for it (``update_draft_token_ids``; ngram caps them at
  ``max_model_len`` less the request's tokens). The request's next decode step feeds its last sampled token
  and the drafts: ``1 + drafts`` tokens of the step's token budget, capped by what is left of the budget and by
  ``max_model_len - num_computed_tokens - 1``; drafts cut by the budget are dropped.
- ``allocate_slots`` gives that step slots for all ``1 + drafts`` tokens (``num_lookahead_tokens`` is 0 for
  ngram: no drafter KV); only tokens up to ``request.num_tokens`` (no draft) are cached (hashed).
- The verification accepts a prefix of the drafts: ``num_computed_tokens`` goes back by the rejected ones, the
  blocks stay with the request (the next steps fill them), and the request gains ``accepted + 1`` tokens
  (trimmed at ``max_tokens``: a finishing request computed ``prompt + output - 1`` tokens, whatever it accepted).
  With drafts on, the blocks full up to ``num_computed_tokens`` are cached right after the step
  (``update_from_output``'s ``cache_blocks``), which kvsim's preemption and finish paths do too (a request tells
  the allocator its tokens before it frees them; the allocator's fast path never crosses a held draft block
  without caching it, `PagedAllocator.grow`).
- A waiting request with one token left to compute (a prefix hit of all but its last token) is padded to
  ``1 + num_speculative_tokens`` tokens when no running prefill is scheduled in the step and either a running
  request is or it has hits (``pad_spec_decode``), with placeholder drafts that are never accepted; if the
  budget left is smaller, admission stops.
- ``max_num_scheduled_tokens`` stays ``max_num_batched_tokens`` and no draft slots are set aside for ngram
  (``max_num_new_slots_for_drafting`` 0).

kvsim's own model, not vLLM's: the drafter always proposes (a real ngram drafter proposes only where the
context repeats a n-gram) and every draft is accepted with probability ``spec_acceptance_rate``, the drafts of
a verification as a prefix up to the first rejection. The draws come from one numpy Generator per request,
seeded from ``(seed, 0x5EC, request index)``, which draws ``num_speculative_tokens`` uniforms at every
verification of real drafts whatever number it verifies, so that they do not depend on the scheduling order
(``tools/vllm_oracle/driver.py`` draws the same ones). No drafter time: ngram runs on the CPU between steps.

The model-based drafters ``eagle``, ``eagle3`` and ``mtp`` (vLLM's ``SpeculativeConfig.use_eagle``) schedule the
same way and add what kvsim is about, KV memory:

- Lookahead slots: ``VllmConfig.num_lookahead_tokens`` (``config/vllm.py``) is ``num_speculative_tokens`` for
  them (0 for ngram), and the scheduler passes it to every ``allocate_slots`` call, a running request's (decode
  or prefill chunk) and a waiting one's (``Scheduler.schedule``): slots for ``computed + new + lookahead``
  tokens, capped at ``max_model_len`` (``KVCacheManager.allocate_slots``' ``num_tokens_need_slot``). The
  drafter writes its KV there; like draft slots they are held, never cached, and filled by later tokens. The
  ``full_sequence_must_fit`` admission test does not count them. ``VllmConfig._set_max_num_scheduled_tokens``
  refuses ``max_num_batched_tokens <= num_lookahead_tokens``; kvsim too (`check_drafter_budget`). Its cut of
  ``max_num_active_seqs`` to ``max_num_batched_tokens // num_lookahead_tokens`` is DFlash's and DSpark's only.
- The drafter's own KV: its attention layers get KV cache specs beside the target's
  (``GPUModelRunner.get_kv_cache_spec``, flagged ``is_draft``, a field left out of the spec's equality), so with
  the target's layout they join the target's one KV cache group and one block table, and a block costs every
  layer of that group: ``num_blocks = available_memory // bytes_per_block`` with ``bytes_per_block`` the sum of
  the group's layers' pages (``kv_cache_planning.get_kv_cache_config_from_groups`` and
  ``_get_kv_cache_bytes_per_block``). EAGLE and EAGLE-3 drafters have one decoder layer with the target's KV
  heads; MTP runs the model's ``num_nextn_predict_layers`` (DeepSeek-V3: 1, an MLA layer like the target's), and
  more than one module with ``num_speculative_tokens > 1`` is multi-module MTP (``use_multi_module_mtp``), whose
  prefill lookahead kvsim does not model: refused, as is ``mtp`` on a catalog entry without the field. A drafter
  whose layers would form a KV cache group of their own (EAGLE's GQA layer beside an MLA model) is refused
  (`drafter_layers`). On a sliding-window model (gpt-oss) the drafter's full-attention layer joins the full
  layers, and vLLM's planner groups them by the larger count where it is under 1.5 times the smaller (12
  sliding and 13 full: two groups of 13, the sliding one padded; `allocators.kv_cache_groups.split_kv_groups`),
  every group holding the lookahead slots (`allocators.hybrid`). On a hybrid Mamba model, Qwen3-Next's one MTP
  layer is a full-attention layer (``model_executor/models/qwen3_next_mtp.py:89-96``): it joins the attention
  group of the hybrid pool (`allocators.mamba_layout.hybrid_mamba_pool`, groups of 13 layers), modelled with
  prefix caching off and on (`allocators.mamba_layout.check_mamba_speculation`; ``tools/vllm_oracle/gdn_driver.py --mtp`` and
  ``--mtp-align``, ``tests/sim/test_sim_gdn_mtp_parity.py`` and ``test_sim_gdn_mtp_align_parity.py``): on, its
  lookahead slots take no Mamba state column (`allocators.hybrid_queries.HybridQueries._main_model_drafts`).
  `allocators.capacity.kv_capacity` sizes the pool with the drafter layers (``drafter_layers``), and counts the
  drafter's weights (one average target decoder layer each: approximate, `drafter_weight_bytes`).
- Prefix caching: with a drafter, vLLM hashes each block with the token after it (``num_hash_lookahead_tokens``
  1, ``kv_cache_utils.get_request_block_hasher``): a block is shared only if the token after it is too. A shared
  system prompt (``prefix_group``) ending at a block's end is followed by each request's own token, so that block
  is the request's own (`sim.kernel.arrivals.ArrivalSource.make_group`); a request's own blocks, hit again after
  a preemption, hit as before (the hit stops a token short of its tokens). A trace's prefix hashes
  (``hash_ids``) hash each block with the token after it (`workloads.request.Request.block_hashes`'s
  ``lookahead``): a block ending at a unit's end is shared only by requests whose next units are too (the trace
  cannot say whether two different units start with the same token: kvsim takes them to differ). vLLM 0.34 does
  the same beside its offloading connector (a host tier), whose keys are these hashes
  (``supports_lookahead_block_hashes``, ``VllmConfig._resolve_num_hash_lookahead_tokens``): the host is looked up
  no further than the blocks hashed, a block is offered to it once hashed (`Scheduler.hashed_for_stores`), and a
  host block holds the drafter's layers too (`sim.kernel.replica.host_slot_bytes`). (vLLM 0.33 kept the legacy
  hashes beside a connector and dropped every prefix hit's last block instead.)
- Drafter GPU time (`sim.kernel.roofline_cost.StepCostModel.drafter_time`): the proposer
  (``v1/spec_decode/llm_base_proposer.py``, ``propose``) runs its layers once over all the step's scheduled
  tokens, then ``num_speculative_tokens - 1`` times over one token of each request it drafts for. kvsim prices
  each pass with the roofline's terms scaled to the drafter's layers (weights, FLOPs, KV reads and writes of
  ``drafter_layers`` of the target's average layer) plus the LM head (``vocab x hidden``: EAGLE shares the
  target's, ``_maybe_share_lm_head``; read and multiplied each pass); no launch overhead per pass. Approximate:
  an EAGLE layer's extra input projection (``fc``) and EAGLE-3's own smaller vocabulary are not priced.

Under ``--async-scheduling`` (vLLM 0.33's default with drafts) the ``AsyncScheduler`` schedules a step before the
verifications in flight are processed: what it does not know yet is kept per step (`SpecDecode.note_in_flight`) and
read where vLLM's scheduler reads it (`in_flight_rejected`, `computed`, `reaches_model_len`, `unsure`,
`in_flight_unknown`); checked on attention-only models against vLLM's ``AsyncScheduler``
(``tools/vllm_oracle/spec_cases.py --async-scheduling``, ``tests/sim/test_sim_async_spec_parity.py``), and on hybrid
Mamba-2 and gated DeltaNet pools wherever drafts are modelled there synchronously (``mamba_driver.py`` and
``gdn_driver.py --async-scheduling``, ``tests/sim/test_sim_hybrid_async_spec_parity.py``): a Mamba group frees the
states behind the tokens processed, which count a verification's accepted drafts once its output is (`landed`),
and a finished request scheduled once more (`unsure`) moves its states for its drafts as a verification does.

Checked against vLLM 0.33's scheduler built for an EAGLE drafter (``tools/vllm_oracle/spec_cases.py --method
eagle``, ``tests/sim/test_sim_spec_drafter.py``): every metric and the blocks in use after every step exact, and
the pool against vLLM's ``get_kv_cache_configs`` with the drafter layer (``--pool``). The drafter's time and
weights are kvsim's estimates, not checked.
"""

from __future__ import annotations

import numpy as np

from sim.kernel.json_argument import json_object
from sim.kernel.sequence_group import FINISHED, RUNNING, SequenceGroup

DRAFTER_METHODS = ("eagle", "eagle3", "mtp")
"""Methods whose drafter is a model run on the GPU: lookahead slots, drafter KV layers and drafter time."""
METHODS = ("ngram", *DRAFTER_METHODS)
"""Drafting methods modelled: ngram has no drafter model (no drafter KV, no drafter GPU time). Separate draft
models (``draft_model``), DFlash, DSpark and the rest are not modelled."""
KEYS = ("method", "num_speculative_tokens", "model", "prompt_lookup_min", "prompt_lookup_max")
STREAM = 0x5EC  # the acceptance Generators' stream key, apart from every other draw kvsim makes
VERIFICATIONS_AHEAD = 64  # a request's verifications whose acceptance uniforms are drawn in one call (`accept`)


def parse_speculative_config(text: str) -> int:
    """``--speculative-config``'s JSON (vLLM's engine argument) -> ``num_speculative_tokens``; refuses what is
    not modelled with the reason."""
    return parse_speculative(text)[1]


def speculative_method(text: str | None) -> str | None:
    """The drafting method ``--speculative-config`` names (None without one)."""
    return None if text is None else parse_speculative(text)[0]


def parse_speculative(text: str) -> tuple[str, int]:
    """``--speculative-config``'s JSON -> ``(method, num_speculative_tokens)``; refuses what is not modelled
    with the reason."""
    spec = json_object("--speculative-config", text)
    unknown = sorted(set(spec) - set(KEYS))
    if unknown:
        raise ValueError(f"--speculative-config: {', '.join(unknown)} not modelled (kvsim reads "
                         f"{', '.join(KEYS)})")
    method = spec.get("method") or ("ngram" if spec.get("model") in ("ngram", "[ngram]") else None)
    if method not in METHODS:
        raise ValueError(f"--speculative-config: method {method!r} is not modelled; only {', '.join(METHODS)} "
                         "(ngram: no drafter model; eagle, eagle3, mtp: a drafter of the target's layout, with "
                         "its KV layers and lookahead slots): separate draft models, DFlash and DSpark size their "
                         "drafter KV otherwise")
    if method in ("eagle", "eagle3") and not spec.get("model"):  # mtp defaults to the target's own MTP layers
        raise ValueError(f"--speculative-config: method {method!r} needs \"model\", the drafter checkpoint (vLLM's "
                         "SpeculativeConfig: 'num_speculative_tokens was provided but without speculative model')")
    k = spec.get("num_speculative_tokens")
    if type(k) is not int or k <= 0:
        raise ValueError(f"--speculative-config: num_speculative_tokens must be a positive integer, got {k!r}")
    for key in ("prompt_lookup_min", "prompt_lookup_max"):
        if key in spec and (type(spec[key]) is not int or spec[key] <= 0):
            raise ValueError(f"--speculative-config: {key} must be a positive integer, got {spec[key]!r}")
        if key in spec and method != "ngram":
            raise ValueError(f"--speculative-config: {key} is ngram's; method {method!r} has no n-gram lookup")
    return method, k


def drafter_layers(method: str | None, model) -> int:
    """KV layers the drafter adds to every block (the module docstring): 0 for ngram, 1 for EAGLE and EAGLE-3,
    the catalog's ``num_nextn_predict_layers`` for MTP (refused without it, or with several modules). Refused
    where the drafter's layers would not join a KV cache group of the target's: EAGLE on an MLA model (its drafter
    layer has GQA heads of its own). On a sliding-window model they join its full layers
    (`allocators.capacity.with_drafter_layers`)."""
    if method not in DRAFTER_METHODS:
        return 0
    if method != "mtp":
        if model.kv_lora_rank:
            raise ValueError(f"--speculative-config: method {method!r} on {model.name}, an MLA model: its EAGLE "
                             "drafter's attention is not MLA, a second KV cache group kvsim does not model (mtp "
                             "runs the model's own MLA layers)")
        return 1
    layers = model.num_nextn_predict_layers
    if not layers:
        raise ValueError(f"--speculative-config: method 'mtp' needs a model with MTP layers; catalog entry "
                         f"{model.name!r} gives no num_nextn_predict_layers")
    if layers > 1:
        raise ValueError(f"--speculative-config: {model.name} has {layers} MTP modules: vLLM's multi-module MTP "
                         "(its prefill lookahead of num_speculative_tokens) is not modelled")
    return layers


def num_lookahead_tokens(method: str | None, k: int) -> int:
    """vLLM's ``VllmConfig.num_lookahead_tokens`` (``config/vllm.py:646-651``): the slots a model-based drafter's
    KV takes after every ``allocate_slots``' tokens, ``num_speculative_tokens`` for eagle, eagle3 and mtp, 0 for
    ngram (no drafter KV)."""
    return k if method in DRAFTER_METHODS else 0


def final_lag(group: SequenceGroup, lag: int, told: int) -> int:
    """The tokens a finishing ``group``'s sequence computed that the allocator was not told (``lag``, past the
    ``told`` ones), drafts accepted past its last output token dropped: vLLM trims a stopped request's
    ``num_computed_tokens`` to its last token but one (``_update_request_with_output``,
    ``v1/core/sched/scheduler.py:2758-2763``) before caching and freeing its blocks."""
    return min(lag, group.final_tokens - told)


def check_drafter_budget(method: str | None, k: int, max_num_batched_tokens: int) -> None:
    """vLLM's ``VllmConfig._set_max_num_scheduled_tokens``: a drafter's lookahead slots must leave room for a
    token in the step."""
    lookahead = num_lookahead_tokens(method, k)
    if lookahead and max_num_batched_tokens <= lookahead:
        raise ValueError(f"--max-num-batched-tokens ({max_num_batched_tokens}) must exceed the drafter's "
                         f"{lookahead} lookahead slots (num_speculative_tokens), as vLLM requires")


class SpecDecode:
    """The drafts each running request holds, the acceptance draws and vLLM's spec decoding counters."""

    def __init__(self, num_speculative_tokens: int, acceptance_rate: float, seed: int, max_model_len: int,
                 method: str = "ngram", drafter_layers: int = 0, asynchronous: bool = False) -> None:
        self.k = num_speculative_tokens
        self.method = method
        self.lookahead = num_lookahead_tokens(method, num_speculative_tokens)
        self.drafter_layers = drafter_layers
        self.p = acceptance_rate
        self.seed = seed
        self.max_model_len = max_model_len
        self.drafts: dict[int, int] = {}  # group index -> drafts its next decode step feeds
        # group index -> [its acceptance Generator, uniforms drawn ahead, the next one's position] (`accept`)
        self.draws: dict[int, list] = {}
        self.scheduled: list[tuple[SequenceGroup, int, bool]] = []  # this step's decoders (group, drafts, padded)
        self.tokens = self.pairs = 0  # this step's drafts, and the attention pairs of their queries
        self.context = 0  # this step's verifying requests' context, which the drafter's later passes read
        self.num_drafts = self.num_draft_tokens = self.num_accepted_tokens = 0
        # under async scheduling (`sim.kernel.async_outputs`), what the verifications of the step in flight leave
        # unknown to the step being planned: their drafts and accepted drafts, and the groups they finish only by
        # accepting (`note_in_flight`); empty with synchronous scheduling
        self.asynchronous = asynchronous
        self.verified: dict[int, tuple[int, int]] = {}  # group index -> (drafts, accepted) of its verification
        self.unsure: set[int] = set()
        self.accepted_before: dict[int, int] = {}  # group index -> accepted drafts of the step before's verification

    def in_flight_rejected(self, group: SequenceGroup) -> int:
        """Drafts of ``group``'s verification in flight (the step before the one being planned) that it rejects: 0
        with synchronous scheduling, where that step's output is processed before the next is scheduled. vLLM's
        ``AsyncScheduler`` schedules as if they were all accepted: the step advanced ``num_computed_tokens`` over
        them (``_update_after_schedule``, ``v1/core/sched/scheduler.py:1858``) and only the output's rejection count,
        processed after the next step is scheduled, takes them back (``scheduler.py:2361-2364``)."""
        drafts, accepted = self.verified.get(group.index, (0, 0))
        return drafts - accepted

    def landed(self, sched) -> dict[int, int]:
        """Under async scheduling, as a step is planned: sequence -> the drafts accepted by its group's verification
        two steps back, whose output was processed after the step before was scheduled (``update_from_output``
        keeps ``num_computed_tokens`` over them and takes the rejected ones back), so that vLLM counts them as
        processed now (``allocate_slots``' ``num_computed_tokens - num_in_flight_tokens``,
        ``v1/core/kv_cache_manager.py:561-567``), which frees the Mamba states behind them
        (`HybridPagedAllocator.begin_step`): running groups' and held finished ones' (`InFlight.releasing`); a group
        preempted since holds no sequence."""
        live, held = sched.live, sched.in_flight.releasing
        return {seq_id: accepted for index, accepted in self.accepted_before.items()
                if (group := live.get(index, held.get(index))) is not None and group.state in (RUNNING, FINISHED)
                for seq_id in group.seq_ids}

    def in_flight_accepted(self, group: SequenceGroup) -> int:
        """Drafts of ``group``'s verification in flight that it accepts: under async scheduling vLLM does not know
        them (nor hash their blocks) until that output is processed (`InFlight.tail_unknown`)."""
        return self.verified.get(group.index, (0, 0))[1]

    def hash_lookahead(self) -> int:
        """Tokens after a block that its hash covers, vLLM's ``num_hash_lookahead_tokens``
        (``VllmConfig._resolve_num_hash_lookahead_tokens``, vLLM 0.34): one for a model-based drafter (the
        drafter's KV at a block's last position reads the token after it; kvsim's prefix hashes drop such a block,
        `sim.kernel.arrivals`), with or without the offloading connector, none for ngram."""
        return 1 if self.lookahead else 0

    def unhashed_tails(self, sched) -> list[int]:
        """Synchronously, with a drafter's lookahead block hashes: the sequences whose allocation this step reached
        every token they know (a verification's fed token, a prefill's last chunk), so that the block ending there
        has no hash yet (its hash covers the token after it, which this step samples: ``num_hash_lookahead_tokens``,
        ``get_request_block_hasher``); vLLM caches it once the step's output is processed
        (``update_from_output``'s ``cache_blocks``), so admissions this step miss it (`Scheduler.plan_step` hides
        it from them where other requests share its hash: a session turn's, which the next turn's prompt holds;
        `admitted_tail` for a request admitted this step, from the admissions after it)."""
        if not self._hashes_lag(sched):
            return []
        tokens = sched.step_tokens
        return [seq_id for g in sched.running if g.state == RUNNING and g.index in tokens
                for seq_id in self.admitted_tail(sched, g)]

    def _hashes_lag(self, sched) -> bool:
        """Whether a block's hash waits for the token after it (`unhashed_tails`): a drafter's lookahead block
        hashes, synchronously (under async scheduling `InFlight.tail_unknown` covers it)."""
        return bool(self.hash_lookahead()) and sched.in_flight is None

    def admitted_tail(self, sched, group: SequenceGroup) -> list[int]:
        """`unhashed_tails` of one ``group`` scheduled this step (the running loop's, or admitted): its sequences
        if its allocation reaches every token it knows."""
        if not self._hashes_lag(sched):
            return []
        return [seq_id for seq_id in group.seq_ids if sched.memory.num_tokens(seq_id) >= group.prefill_target]

    def in_flight_unknown(self, group: SequenceGroup, cached_to_known: bool) -> int:
        """Tokens a preempted ``group`` holds past those vLLM's async scheduling has hashed, beyond its last one
        (`InFlight.tail_unknown`): the drafts its verification in flight accepts (appended only with that output,
        ``_update_request_with_output``, ``v1/core/sched/scheduler.py:2744-2770``), and where its blocks were last
        cached up to the tokens known (``cached_to_known``: this step's allocation, or the one completing its
        prefill; ``allocate_slots``' ``num_tokens_to_cache``, ``v1/core/kv_cache_manager.py:621``) the
        `hash_lookahead` tokens a block's hash needs after it."""
        return self.in_flight_accepted(group) + (self.hash_lookahead() if cached_to_known else 0)

    def computed(self, group: SequenceGroup, step: int) -> int:
        """vLLM's ``num_computed_tokens`` of a decoding ``group`` as step ``step`` is scheduled: every token but the
        last sampled one, plus the rejected drafts it still counts under async scheduling
        (`in_flight_rejected`)."""
        return group.prompt + step - group.base - 1 + self.in_flight_rejected(group)

    def drafts_for(self, group: SequenceGroup, step: int, room: int) -> int:
        """Drafts ``group`` feeds this step: those proposed after its last step, capped by ``room`` (the budget
        left after its sampled token) and by ``max_model_len - num_computed_tokens - 2`` (vLLM caps the sampled
        token and the drafts at ``max_model_len - num_computed_tokens - 1``, ``v1/core/sched/scheduler.py:852-857``;
        under async scheduling ``num_computed_tokens`` counts the in-flight rejected drafts, `computed`)."""
        return max(0, min(self.drafts.get(group.index, 0), room, self.max_model_len - self.computed(group, step) - 2))

    def reaches_model_len(self, group: SequenceGroup, step: int) -> bool:
        """Whether ``group`` may not feed even its sampled token this step: the in-flight rejected drafts vLLM still
        counts leave no position below ``max_model_len`` (its running loop's ``num_new_tokens == 0``: "the request
        has reached ... max_model_len", ``v1/core/sched/scheduler.py:891-906``); it is skipped, as a decoder the
        budget does not reach."""
        return self.max_model_len - self.computed(group, step) - 1 <= 0

    def held(self, drafts: int, group: SequenceGroup | None = None) -> int:
        """Slots a step holds after the tokens it computes: its drafts' and the drafter's lookahead slots
        (the allocator caps them at ``max_model_len``, as ``allocate_slots`` does), and under async scheduling the
        in-flight rejected drafts of ``group`` that vLLM's ``allocate_slots`` counts as computed
        (`in_flight_rejected`)."""
        return drafts + self.lookahead + (0 if group is None else self.in_flight_rejected(group))

    def reach(self, final_tokens: int) -> int:
        """Slots a request ending at ``final_tokens`` may hold at its last verification: ngram's drafts end a
        token short of ``max_model_len``, a drafter's lookahead slots reach it."""
        if self.lookahead:
            return min(final_tokens + self.k + self.lookahead, self.max_model_len)
        return min(final_tokens + self.k, self.max_model_len - 1)

    def pads(self, computed: int) -> bool:
        """Whether a waiting request with one token left to compute after ``computed`` may be padded to a
        verification of ``num_speculative_tokens`` placeholder drafts within ``max_model_len``."""
        return computed + 1 + self.k + 1 <= self.max_model_len

    def schedule(self, group: SequenceGroup, drafts: int, tokens: int, *, padded: bool) -> None:
        """``group``, holding ``tokens`` tokens, feeds its sampled token and ``drafts`` drafts this step
        (``padded``: placeholders, never accepted)."""
        self.scheduled.append((group, drafts, padded))
        self.tokens += drafts
        self.pairs += drafts * tokens + drafts * (drafts + 1) // 2
        if self.drafter_layers:
            self.context += tokens + drafts

    def step_figures(self) -> tuple[int, int]:
        """The step's draft tokens and their attention pairs, for the cost model; reset for the next step."""
        figures = self.tokens, self.pairs
        self.tokens = self.pairs = 0
        return figures

    def drafter_figures(self) -> tuple[int, int]:
        """The requests the drafter's later passes draft for this step (those verifying) and the context they
        read, for `StepCostModel.drafter_time`; reset for the next step. Requests whose prefill this step ends
        draft too (vLLM's proposer samples them); kvsim counts them in the first pass only."""
        figures = len(self.scheduled), self.context
        self.context = 0
        return figures

    def accept(self, group: SequenceGroup, drafts: int) -> int:
        """Drafts accepted of the ``drafts`` a verification of ``group`` feeds: its stream's next ``k`` uniforms,
        a prefix of those below the acceptance rate. They are drawn `VERIFICATIONS_AHEAD` verifications at a time
        (a numpy Generator's uniforms are the same drawn in one call or in many: one call costs what a
        verification's own bookkeeping does)."""
        entry = self.draws.get(group.index)
        if entry is None:
            entry = self.draws[group.index] = [np.random.default_rng([self.seed, STREAM, group.index]), [], 0]
        _, uniforms, at = entry
        if at == len(uniforms):
            uniforms, at = entry[0].random(self.k * VERIFICATIONS_AHEAD).tolist(), 0
            entry[1] = uniforms
        entry[2] = at + self.k
        p, verified = self.p, min(drafts, self.k)
        for i in range(verified):
            if uniforms[at + i] >= p:
                return i
        return verified

    def step_done(self, sched, joiners: list[SequenceGroup]) -> None:
        """The step has run: each verification accepts its drafts (the group gains them: its decode clock moves
        ahead, and it may now finish earlier), and every group that sampled (the ``joiners``, whose prefill it
        ended, and its decoders) gets its next drafts."""
        step, tokens, sampled = sched.step, sched.step_tokens, list(joiners)
        if self.asynchronous:  # read by `landed` as the step after next is planned
            self.accepted_before = {index: accepted for index, (_, accepted) in self.verified.items() if accepted}
        self.verified, self.unsure = {}, set()
        for group, drafts, padded in self.scheduled:
            if group.state != RUNNING or not (padded or group.index in tokens):
                continue
            sampled.append(group)
            if not drafts:  # nothing to verify (drafts cut by the budget or max_model_len)
                continue
            accepted = 0 if padded else self.accept(group, drafts)
            if self.asynchronous:
                self.note_in_flight(group, drafts, accepted, step + 1 - group.base)
            self.num_drafts += 1
            self.num_draft_tokens += drafts
            self.num_accepted_tokens += accepted
            if accepted:
                group.base -= accepted
                for seq_id in group.seq_ids:
                    sched.decode.advance(seq_id, accepted)
                group.epoch += 1
                sched.completions.push(group)
        self.scheduled = []
        for group in sampled:
            if group.state == RUNNING:
                tokens_now = group.prompt + step + 1 - group.base
                self.drafts[group.index] = max(0, min(self.k, self.max_model_len - tokens_now))

    def note_in_flight(self, group: SequenceGroup, drafts: int, accepted: int, generated: int) -> None:
        """Remember what the next step, scheduled before this verification's output is processed under async
        scheduling, does not know: the drafts it verifies and accepts (`in_flight_rejected`,
        `in_flight_accepted`), and whether ``group``, with
        ``generated`` output tokens after the step without its drafts, finishes only by accepting them. vLLM's
        running loop skips a request only when the step in flight is sure to reach ``max_tokens`` with every
        draft rejected (``num_computed_tokens + 2 - num_output_placeholders >= num_prompt_tokens + max_tokens``,
        ``v1/core/sched/scheduler.py:799-813``); otherwise it schedules it once more, a step whose output is
        dropped (`unsure`)."""
        self.verified[group.index] = drafts, accepted
        if generated < group.output <= generated + accepted:
            self.unsure.add(group.index)

    def stop(self, group: SequenceGroup) -> None:
        """A preempted or finished request holds no drafts (vLLM's ``_preempt_request`` clears them)."""
        self.drafts.pop(group.index, None)

    def summary(self) -> dict:
        """The drafting method, its lookahead slots a step and KV layers, then vLLM's ``SpecDecodingStats`` over the
        run and its logged mean acceptance length."""
        return with_acceptance_length({
            "method": self.method, "num_lookahead_tokens": self.lookahead, "drafter_layers": self.drafter_layers,
            "num_speculative_tokens": self.k, "spec_acceptance_rate": self.p, "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens, "num_accepted_tokens": self.num_accepted_tokens})


SPEC_COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
"""vLLM's ``SpecDecodingStats`` counters, which a fleet's engines each keep and its summary sums."""


def with_acceptance_length(summary: dict) -> dict:
    """``summary`` with vLLM's logged mean acceptance length, 1 + accepted drafts per verification (None
    without one)."""
    drafts = summary["num_drafts"]
    return summary | {"mean_acceptance_length": 1 + summary["num_accepted_tokens"] / drafts if drafts else None}


def fleet_spec_summary(summaries: list[dict]) -> dict:
    """A fleet's spec decoding summary from its replicas' (each an engine drafting for its own requests, as
    vLLM's data-parallel engine cores do): their counters summed, the acceptance length over them all."""
    total = {k: v for k, v in summaries[0].items() if k not in SPEC_COUNTERS and k != "mean_acceptance_length"}
    return with_acceptance_length(total | {k: sum(s[k] for s in summaries) for k in SPEC_COUNTERS})


def check_spec_run(config, workload) -> None:
    """`check_spec_workload` for a run of ``config`` with drafts (the workload as the engines run it:
    `sim.kernel.parallel_sampling.as_run`'s); nothing without."""
    if config.speculative_config is not None:
        check_spec_workload(workload)


def check_spec_workload(workload) -> None:
    """Refuse what speculative decoding is not modelled with: a row sampled ``n > 1`` times as one group
    (``--parallel-sampling fork``, vLLM v0's; fanned out, its children are vLLM v1's requests, checked), beam
    search (vLLM v1 has none with drafts). Sessions and closed loops run under either scheduler
    (``spec_cases.py``'s ``sessions*``, ``closed_loop*`` and ``*_sessions*`` async cases), and a trace's prefix
    hashes with any method (the module docstring)."""
    reasons = []
    if (np.asarray(workload.n) > 1).any():
        reasons.append("rows sampled n > 1 times as one group (--parallel-sampling fork; fan-out is modelled)")
    if (np.asarray(workload.beam_width) > 1).any():
        reasons.append("beam search")
    if reasons:
        raise ValueError("--speculative-config is not modelled with " + ", ".join(reasons))
