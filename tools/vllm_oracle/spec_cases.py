"""Reference runs of vLLM's ngram speculative decoding: cases of ``cases.py`` rerun with drafts.

    HF_HUB_OFFLINE=1 VENV/bin/python tools/vllm_oracle/spec_cases.py [--out tests/sim/data/vllm_oracle/spec] [CASE ...]
    HF_HUB_OFFLINE=1 VENV/bin/python tools/vllm_oracle/spec_cases.py --method eagle [CASE ...]
    HF_HUB_OFFLINE=1 VENV/bin/python tools/vllm_oracle/spec_cases.py --pool

Each case is a case of ``cases.py`` (its trace and scheduler settings) plus ``num_speculative_tokens`` and
kvsim's ``spec_acceptance_rate``; the driver feeds vLLM's scheduler that many drafts after every step that
samples and accepts them as kvsim draws them (``driver.accepted_drafts``). Writes ``OUT/CASE/{trace.csv,
settings.json, steps.csv.gz, requests.csv, spec.json}``; reruns are byte-identical.

``--async-scheduling`` runs the ``ASYNC_CASES`` (EAGLE, MTP or ngram, K 1 or 3) through vLLM's
``AsyncScheduler`` and its engine's batch queue of two (``async_gap.run_async``: step t + 1 scheduled before step
t's output is processed, draft ids never sent to the scheduler), as vLLM 0.33 runs speculative decoding by default,
and writes them to ``tests/sim/data/vllm_oracle/async_spec/CASE`` (``async_gap.py``'s step and request rows,
``settings.json`` with ``"method"`` and ``"async_scheduling": true``, ``spec.json``)::

    HF_HUB_OFFLINE=1 VENV/bin/python tools/vllm_oracle/spec_cases.py --async-scheduling [CASE ...]

An MTP case switches the config to ``method = "mtp"`` as `as_drafter` does for EAGLE: one MTP module
(``use_multi_module_mtp`` is False without a drafter config) reads what EAGLE reads (one prefill lookahead token,
``num_speculative_tokens`` lookahead slots, lookahead block hashes), so the scheduler is EAGLE's. The ngram cases
keep the driver's ngram config: vLLM 0.33's V1 model runner refuses async scheduling with it
(``v1_async_sched_incompat``, ``vllm/config/vllm.py:1652-1680``), its V2 model runner, the default where it is
supported (``VllmConfig.use_v2_model_runner``), runs it, as the driver's config does.

The ``EAGLE_CASES`` (written under ``OUT/eagle/CASE``, with ``"method": "eagle"`` in ``settings.json``) run the
same scheduler as vLLM runs it with an EAGLE drafter. A real ``SpeculativeConfig(method="eagle")`` loads the
drafter checkpoint's config, which this offline harness does not have, so the driver's ngram config is switched to
``method = "eagle"`` just before the ``Scheduler`` is built: everything the scheduler and its KV cache manager
read from it (``VllmConfig.num_lookahead_tokens``, ``num_prefill_lookahead_tokens``, ``num_hash_lookahead_tokens``,
``SpeculativeConfig.use_eagle``, ``use_eagle_block_drop``) is then EAGLE's, and so is the driver's block hasher
(built after, from ``num_hash_lookahead_tokens``). The drafter's KV layer is not in the driver's one-layer pool:
the scheduler counts blocks, not bytes, and ``num_blocks`` is given (the pool's size in blocks, which the drafter
layer changes, is checked apart, `pool_blocks`). The pool's one group is marked as holding the drafter's layers
(``is_eagle_group``), as vLLM's planner marks it: only vLLM's offloading connector reads the mark, and only with
legacy block hashes (vLLM 0.33's with a ``kv_transfer_config``: it kept a drafter group's volatile trailing chunk
out of its stores and dropped the last chunk a lookup hit). vLLM 0.34's connector keys the host by the lookahead
hashes (``supports_lookahead_block_hashes``), which `driver.switch_drafter` resolves again once the method is
switched, so with a host tier (the ``offload_*`` EAGLE cases) the references are 0.34's. One of them,
``offload_hash_units``, depends on where Python places its objects in vLLM's process: a rerun may give its other
outcome, which parts from the committed one at step 667 (a host hit of 64 tokens against 80).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import cases  # noqa: E402
import driver  # noqa: E402

SPEC_CASES = {  # name -> (the case it reruns, num_speculative_tokens, acceptance rate)
    "ample": ("ample", 3, 0.6),
    "contended": ("contended", 2, 0.5),
    "max_num_seqs": ("max_num_seqs", 4, 0.8),
    "shared_prefix_cached": ("shared_prefix_cached", 3, 0.3),
    "small_budget_threshold": ("small_budget_threshold", 4, 0.7),
    "max_model_len_capped": ("max_model_len_capped", 3, 0.8),
    "priority_contended": ("priority_contended", 2, 0.6),
    "long_prefill_threshold": ("long_prefill_threshold", 3, 0.5),
    "offline_burst": ("offline_burst", 4, 0.4),
    "reserve_full_isl_off": ("reserve_full_isl_off", 3, 0.7),
    "shared_prefix_uncached": ("shared_prefix_uncached", 2, 0.8),
    "block_size_32": ("block_size_32", 5, 0.7),
    # drafts spanning more than a block (16 tokens): held blocks that later tokens fill and cache
    "contended_20_drafts": ("contended", 20, 0.9),
    # a long-prefill threshold (16) below a verification's 1 + 20 tokens: vLLM caps it, drafts included
    "threshold_below_drafts": ("threshold_16_contended", 20, 0.95),
    # vLLM's offloading connector (a host tier, loads beside the steps): host hits of shared prefixes and whole
    # prompts under drafts
    "offload_shared_prefix": ("offload_shared_prefix", 3, 0.6),
    "offload_whole_prompts": ("offload_whole_prompts", 2, 0.5),
    # found by `fuzz.py` (seed 40, draw 107): a request that loaded all its prompt but the last token is padded
    # with placeholder drafts when scheduled (pad_spec_decode), and a load is admitted only beyond a verification
    # step's blocks more for each prefill in flight and one for itself (`_request_remaining_blocks`,
    # `_spec_decode_step_blocks`)
    "offload_padded_loads": ("fuzz40_0107", 2, 0.3),
    # found by `fuzz.py` (seed 41): generated blocks offloaded (ARC); a request whose last verification accepted
    # drafts stores their blocks when the next step is planned, after that step's stores (finished_req_ids)
    "offload_finished_drafts": ("fuzz41_1126", 2, 0.95),
    # found by `fuzz.py` (seed 53, draw 100): a request whose load landed, scheduled its last chunk, still counts
    # as a prefill in flight for the loads admitted after it in the step (vLLM added it when its load started and
    # drops it once the step is scheduled): its next verification step's block is reserved
    "offload_loaded_final_chunk": ("fuzz53_0100", 2, 0.5),
    # open-loop sessions: a turn's prompt holds the turn before's output, accepted drafts included
    "sessions": ("sessions_open_loop", 3, 0.7),
    "offload_arc_sessions": ("offload_arc_sessions", 2, 0.6),
    # rows sampled n > 1 times, fanned out: each child drafts and verifies on its own (acceptances drawn by its
    # position in the fanned-out trace), the children sharing their prompt's blocks
    "parallel_sampling": ("parallel_sampling", 3, 0.6),
    "parallel_sampling_priority": ("parallel_sampling_priority", 2, 0.7),
    "offload_parallel_sampling_threshold": ("offload_parallel_sampling_threshold", 2, 0.5),
    # rows released by earlier finishes (`releases.py`): a turn sent after the turn before finished, accepted
    # drafts in its prompt; a closed loop's users
    "sessions_released": ("sessions_released", 3, 0.7),
    "closed_loop": ("closed_loop", 3, 0.6),
    "closed_loop_priority": ("closed_loop_priority", 5, 0.8),
    # a trace's own prefix hashes (no lookahead hashes with ngram)
    "hash_units": ("hash_units", 3, 0.7),
    # a sliding-window model (vLLM's hybrid manager: a window group of 128 tokens beside the full one): each group
    # holds blocks for the drafts; a verification frees what the tokens before it leave out of the window
    "hybrid_contended": ("hybrid_contended", 3, 0.6),
    "hybrid_shared_prefix": ("hybrid_shared_prefix", 3, 0.5),
    "hybrid_sessions": ("hybrid_sessions", 2, 0.7),
    "hybrid_long_prefill_threshold": ("hybrid_long_prefill_threshold", 3, 0.5),
    "hybrid_retention_interval_256": ("hybrid_retention_interval_256", 3, 0.7),
    "hybrid_parallel_sampling": ("hybrid_parallel_sampling", 2, 0.6),
    # 20 drafts: a victim's accepted drafts fill a block vLLM caches after the step (``update_from_output``) and
    # free no window block (only an ``allocate_slots`` does), so its window tail is evicted first
    "hybrid_contended_20_drafts": ("hybrid_contended", 20, 0.95),
    "hybrid_drafts_preempted": ("hybrid_drafts_preempted", 20, 0.95),
    # found by `fuzz.py` (seed 71, draw 2639): that rule on a trace's own prefix hashes, dense window retention
    "hybrid_accepted_drafts_fuzz71_2639": ("fuzz71_2639", 5, 0.95),
    # chunked-local attention (Llama 4's): each group holds blocks for the drafts; a block that accepted drafts
    # filled is cached after the step (``update_from_output``), before the next allocation's chunk boundary skips
    # it (found by `chunk_fuzz.py`: seed 2, draw 142)
    "chunked_contended": ("chunked_contended", 3, 0.6),
    "chunked_shared_prefix_20_drafts": ("chunked_shared_prefix", 20, 0.95),
    "chunked_accepted_drafts_chunk2_0142": ("chunk2_0142", 5, 0.95),
    # found by `fuzz.py` (seed 96, draw 370): a session's turn finishes and the engine idles; vLLM schedules once
    # more (its finished request to report), which ranks the turn's host blocks anew (LRU), before the next
    # request's lookup, where kvsim ranked them only at its next planned step, after that lookup, so a later
    # store evicted other blocks than vLLM's and the next turn found host hits vLLM did not
    "offload_lru_idle_finish_fuzz96_0370": ("fuzz96_0370", 3, 0.8),
}

# the `fuzz.py` draws above, their traces seeded by their names (``trace_of``)
cases.CASES.setdefault("fuzz40_0107", dict(
    trace=dict(n=36, prompt=(491, 1053), output=(128, 152), groups=1, whole_prompts=True, gap=0.1),
    max_num_batched_tokens=128, max_num_seqs=128, num_blocks=230, cpu_offload_blocks=89,
    offload_eviction_policy="arc", offload_prompt_only=False, watermark=0.01))
cases.CASES.setdefault("fuzz41_1126", dict(
    trace=dict(n=10, prompt=(496, 1191), output=(19, 278), groups=3, gap=0.0), block_size=32,
    max_num_batched_tokens=128, max_num_seqs=4, scheduler_reserve_full_isl=False, num_blocks=127,
    cpu_offload_blocks=69, offload_eviction_policy="arc", offload_prompt_only=False))
cases.CASES.setdefault("fuzz58_0027", dict(
    trace=dict(n=8, prompt=(10, 308), output=(11, 207), turns=4, turn_gap=(5, 57), gap=1.0, priorities=4),
    scheduling_policy="priority", block_size=32, max_num_batched_tokens=256, max_num_seqs=32,
    scheduler_reserve_full_isl=False, num_blocks=83, cpu_offload_blocks=39, offload_eviction_policy="arc"))
cases.CASES.setdefault("fuzz62_0134", dict(
    trace=dict(n=20, prompt=(421, 1534), output=(130, 227), gap=0.0), max_num_batched_tokens=8192,
    max_model_len=1559, long_prefill_token_threshold=128, num_blocks=300, cpu_offload_blocks=210,
    offload_eviction_policy="arc", offload_prompt_only=False))
cases.CASES.setdefault("fuzz53_0100", dict(
    trace=dict(n=36, prompt=(428, 708), output=(37, 264), gap=0.3), block_size=32, max_num_batched_tokens=2048,
    max_num_seqs=32, long_prefill_token_threshold=64, num_blocks=172, cpu_offload_blocks=75,
    offload_eviction_policy="lru", offload_prompt_only=False))

cases.CASES.setdefault("fuzz89_1035", dict(
    trace=dict(n=22, prompt=(467, 532), output=(18, 276), groups=3, samples=(1, 2, 4), gap=10.0),
    parallel_sampling="fan-out", block_size=32, max_num_batched_tokens=128, max_num_seqs=8,
    long_prefill_token_threshold=64, num_blocks=40, cpu_offload_blocks=21, offload_eviction_policy="arc",
    offload_prompt_only=True))
cases.CASES.setdefault("fuzz75_0116", dict(
    trace=dict(n=18, prompt=(268, 983), output=(16, 135), groups=4, whole_prompts=True, gap=10.0), block_size=32,
    max_num_batched_tokens=2048, max_num_seqs=32, max_model_len=989, num_blocks=43, cpu_offload_blocks=37,
    offload_eviction_policy="arc", offload_prompt_only=False))
cases.CASES.setdefault("fuzz93_0369", dict(
    trace=dict(n=40, prompt=(453, 1503), output=(130, 282), samples=(2, 5), gap=0.0, hash_units=64),
    parallel_sampling="fan-out", max_num_batched_tokens=128, max_num_seqs=128, scheduler_reserve_full_isl=False,
    long_prefill_token_threshold=64, num_blocks=132, cpu_offload_blocks=56, offload_eviction_policy="arc",
    offload_prompt_only=False))
cases.CASES.setdefault("fuzz96_0370", dict(
    trace=dict(n=8, prompt=(44, 125), output=(37, 66), turns=3, turn_gap=(19, 96), gap=10.0),
    max_num_batched_tokens=256, max_num_seqs=8, num_blocks=44, cpu_offload_blocks=16, offload_eviction_policy="lru",
    offload_prompt_only=True))
cases.CASES.setdefault("fuzz71_2639", dict(
    trace=dict(n=29, prompt=(4, 691), output=(95, 358), gap=0.3, hash_units=16), max_num_batched_tokens=8192,
    scheduler_reserve_full_isl=False, sliding_window=128, prefix_cache_retention_interval=None, num_blocks=192))

cases.CASES.setdefault("chunk2_0142", dict(
    trace=dict(n=27, prompt=(312, 434), output=(61, 166), gap=0.0, hash_units=100), max_num_batched_tokens=1024,
    max_num_seqs=1, max_model_len=561, num_blocks=188, attention_chunk_size=64))

# a sliding-window case of this script's own: shared prefixes under 20 drafts in a pool of 120 blocks, a 64-token
# prefill threshold and sparse window retention every 64 tokens (victims preempted with accepted drafts)
cases.CASES.setdefault("hybrid_drafts_preempted", dict(
    trace=dict(n=40, prompt=(300, 700), output=(20, 300), gap=0.1, groups=2), num_blocks=120, sliding_window=128,
    prefix_cache_retention_interval=64, long_prefill_token_threshold=64))

# a base case of this script's own, beside ``cases.py``'s: whole prompts repeated (a group's members all send its
# prompt, a whole number of blocks long), so the block ending a shared prompt is followed by each request's own
# token, which EAGLE's lookahead block hashes keep from being shared
cases.CASES.setdefault("whole_prompts_cached", dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5,
                                                               groups=4, whole_prompts=True), num_blocks=300))

EAGLE_CASES = {  # name -> (the case it reruns, num_speculative_tokens, acceptance rate)
    "ample": ("ample", 3, 0.6),
    # vLLM's offloading connector, prompt blocks only: lookahead block hashes (vLLM 0.34; 0.33 kept the legacy
    # ones and dropped every hit's last block)
    "offload_shared_prefix": ("offload_shared_prefix", 3, 0.6),
    "offload_whole_prompts": ("offload_whole_prompts", 2, 0.5),
    "offload_sessions": ("offload_sessions", 3, 0.7),
    # found by `fuzz.py` (seed 58, draw 27, under vLLM 0.33's block drop): a waiting request without
    # scheduler_reserve_full_isl
    "offload_sessions_fuzz58_0027": ("fuzz58_0027", 5, 0.95),
    # generated blocks offloaded too
    "offload_generated_blocks": ("offload_generated_blocks", 3, 0.6),
    "offload_finished_drafts": ("fuzz41_1126", 2, 0.95),
    # found by `fuzz.py` (seed 75, draw 116): a preempted request's recompute chunk ends past its prompt, inside
    # the block after it: vLLM counts it decoding by tokens and holds the prompt's last full block back
    "offload_recompute_tail_fuzz75_0116": ("fuzz75_0116", 20, 0.3),
    # found by `fuzz.py` (seed 89, draw 1035): with prompt blocks only, the offloadable tokens stop at the prompt,
    # so a request is never decoding to the store and its prompt's last full block is never held back
    "offload_prompt_only_fuzz89_1035": ("fuzz89_1035", 20, 0.5),
    "shared_prefix_cached": ("shared_prefix_cached", 3, 0.3),
    "whole_prompts_cached": ("whole_prompts_cached", 3, 0.5),
    "contended": ("contended", 2, 0.5),
    "small_budget_threshold": ("small_budget_threshold", 4, 0.7),
    "max_model_len_capped": ("max_model_len_capped", 3, 0.8),
    "offline_burst": ("offline_burst", 4, 0.4),
    "reserve_full_isl_off": ("reserve_full_isl_off", 3, 0.7),
    "shared_prefix_uncached": ("shared_prefix_uncached", 2, 0.8),
    "block_size_32": ("block_size_32", 5, 0.7),
    "contended_20_drafts": ("contended", 20, 0.9),
    # open-loop sessions: a turn admitted in the step whose verification fills the turn before's last block misses
    # it (its hash needs the token that step samples)
    "sessions": ("sessions_open_loop", 3, 0.7),
    "sessions_fuzz44_0271": ("fuzz44_0271", 3, 0.3),
    # a preempted turn admitted again with all it knows, then the next turn in the same step: it misses the block
    "sessions_fuzz46_0008": ("fuzz46_0008", 20, 0.3),
    # fanned-out children: a prompt's last block hashed with each child's first token
    "parallel_sampling": ("parallel_sampling", 3, 0.5),
    "parallel_sampling_priority": ("parallel_sampling_priority", 3, 0.8),
    # rows released by earlier finishes
    "sessions_released": ("sessions_released", 3, 0.5),
    "closed_loop": ("closed_loop", 2, 0.7),
    # the priority policy: a victim the running loop already scheduled this step (lower priority, earlier in the
    # running list) loses the hash of the block its verification just filled
    "priority": ("priority", 3, 0.8),
    "priority_contended": ("priority_contended", 5, 0.7),
    # a trace's own prefix hashes: a block ending where a unit ends is hashed with the next unit's first token
    "hash_units": ("hash_units", 3, 0.6),
    "hash_units_40": ("hash_units_40", 2, 0.8),
    "offload_hash_units": ("offload_hash_units", 3, 0.6),
    # a sliding-window model: the drafter's full-attention layer joins the full group (the block sizes are the
    # driver's given pool), every group holds the lookahead slots; lookahead hashes, so no block drop
    "hybrid_contended": ("hybrid_contended", 3, 0.6),
    "hybrid_shared_prefix": ("hybrid_shared_prefix", 3, 0.5),
    "hybrid_sessions": ("hybrid_sessions", 2, 0.7),
    "hybrid_drafts_preempted": ("hybrid_drafts_preempted", 5, 0.95),
}

# `fuzz.py`'s seed 44, draw 271 and seed 46, draw 8 (their traces seeded by their names): sessions whose next turn
# arrives while the turn before decodes; the second, three turns in a pool of 83 32-token blocks, priorities
cases.CASES.setdefault("fuzz44_0271", dict(
    trace=dict(n=6, prompt=(166, 389), output=(90, 265), turns=2, turn_gap=(3, 30), gap=0.0),
    max_num_batched_tokens=512, max_num_seqs=8, max_model_len=1491, long_prefill_token_threshold=256,
    num_blocks=2017, watermark=0.05))
cases.CASES.setdefault("fuzz46_0008", dict(
    trace=dict(n=9, prompt=(252, 424), output=(87, 182), turns=3, turn_gap=(1, 35), gap=10.0, priorities=3),
    scheduling_policy="priority", block_size=32, max_num_batched_tokens=8192, max_num_seqs=4, num_blocks=83))


ASYNC_CASES = {  # name -> (the case it reruns, method, num_speculative_tokens, acceptance rate)
    # contended pools: preemptions (FCFS), victims whose verification is in flight
    "eagle_contended_k1": ("contended", "eagle", 1, 0.5),
    "eagle_contended_k3": ("contended", "eagle", 3, 0.6),
    "mtp_contended_k1": ("contended", "mtp", 1, 0.7),
    "mtp_contended_k3": ("contended", "mtp", 3, 0.95),
    "eagle_offline_burst_k3": ("offline_burst", "eagle", 3, 0.9),
    "eagle_reserve_full_isl_off_k3": ("reserve_full_isl_off", "eagle", 3, 0.9),
    "eagle_long_prefill_threshold_k3": ("long_prefill_threshold", "eagle", 3, 0.9),
    # 32-token blocks: a victim's accepted drafts in flight reach into a block vLLM has not cached
    "eagle_block_size_32_k3": ("block_size_32", "eagle", 3, 0.9),
    # a small token budget and long-prefill threshold cutting verifications
    "eagle_small_budget_threshold_k3": ("small_budget_threshold", "eagle", 3, 0.7),
    "mtp_small_budget_threshold_k1": ("small_budget_threshold", "mtp", 1, 0.6),
    # shared prefixes cached; whole prompts (a prompt's last block hashed with the first output token)
    "eagle_shared_prefix_cached_k3": ("shared_prefix_cached", "eagle", 3, 0.3),
    "eagle_shared_prefix_cached_k3_high": ("shared_prefix_cached", "eagle", 3, 0.9),
    "mtp_shared_prefix_cached_k3": ("shared_prefix_cached", "mtp", 3, 0.5),
    "eagle_whole_prompts_cached_k1": ("whole_prompts_cached", "eagle", 1, 0.5),
    # max_model_len 1024: in-flight rejected drafts count against it
    "eagle_max_model_len_capped_k3": ("max_model_len_capped", "eagle", 3, 0.8),
    "mtp_max_model_len_capped_k1": ("max_model_len_capped", "mtp", 1, 0.9),
    # priority policy
    "eagle_priority_contended_k1": ("priority_contended", "eagle", 1, 0.6),
    "eagle_priority_contended_k3": ("priority_contended", "eagle", 3, 0.4),
    "mtp_priority_contended_k3": ("priority_contended", "mtp", 3, 0.95),
    "eagle_priority_k3": ("priority", "eagle", 3, 0.9),
    "mtp_priority_k3": ("priority", "mtp", 3, 0.97),
    # ngram: vLLM 0.33's V2 model runner (its default) runs it asynchronously too; no lookahead slots or hashes
    "ngram_contended_k3": ("contended", "ngram", 3, 0.8),
    "ngram_max_model_len_capped_k3": ("max_model_len_capped", "ngram", 3, 0.8),
    "ngram_shared_prefix_cached_k3": ("shared_prefix_cached", "ngram", 3, 0.8),
    # rows sampled n > 1 times, fanned out
    "eagle_parallel_sampling_k3": ("parallel_sampling", "eagle", 3, 0.7),
    "ngram_parallel_sampling_priority_k3": ("parallel_sampling_priority", "ngram", 3, 0.8),
    # closed loops: a user's next request released by a finished output, handed back after the next step is scheduled
    "eagle_closed_loop_k3": ("closed_loop", "eagle", 3, 0.7),
    "mtp_closed_loop_priority_k1": ("closed_loop_priority", "mtp", 1, 0.8),
    "ngram_closed_loop_k3": ("closed_loop", "ngram", 3, 0.6),
    # sessions: a turn's prompt holds the turn before's output, accepted drafts included; open-loop turns admitted
    # while the turn before decodes with drafts in flight, released turns
    "eagle_sessions_k3": ("sessions_open_loop", "eagle", 3, 0.7),
    "ngram_sessions_k3": ("sessions_open_loop", "ngram", 3, 0.7),
    "mtp_sessions_released_k3": ("sessions_released", "mtp", 3, 0.5),
    "eagle_sessions_fuzz44_0271_k3": ("fuzz44_0271", "eagle", 3, 0.3),
    "ngram_sessions_fuzz46_0008_k20": ("fuzz46_0008", "ngram", 20, 0.3),
    # vLLM's offloading connector (a host tier, loads beside the steps, prompt blocks only)
    "ngram_offload_shared_prefix_k3": ("offload_shared_prefix", "ngram", 3, 0.6),
    "ngram_offload_whole_prompts_k2": ("offload_whole_prompts", "ngram", 2, 0.5),
    "ngram_offload_arc_sessions_k2": ("offload_arc_sessions", "ngram", 2, 0.6),
    "ngram_offload_sessions_k3": ("offload_sessions", "ngram", 3, 0.7),
    "eagle_offload_shared_prefix_k3": ("offload_shared_prefix", "eagle", 3, 0.6),
    "mtp_offload_whole_prompts_k2": ("offload_whole_prompts", "mtp", 2, 0.5),
    "eagle_offload_arc_sessions_k2": ("offload_arc_sessions", "eagle", 2, 0.6),
    # generated blocks offloaded too (``offload_prompt_only`` off): a block is stored once its hash is known
    "ngram_offload_generated_blocks_k3": ("offload_generated_blocks", "ngram", 3, 0.6),
    "eagle_offload_generated_blocks_k3": ("offload_generated_blocks", "eagle", 3, 0.6),
    "mtp_offload_finished_drafts_k2": ("fuzz41_1126", "mtp", 2, 0.95),
    # found by `fuzz.py` (seed 62, draw 134): 20 drafts in flight leave more than the last block unhashed
    "ngram_offload_generated_fuzz62_0134_k20": ("fuzz62_0134", "ngram", 20, 0.95),
    "eagle_offload_recompute_tail_fuzz75_0116_k20": ("fuzz75_0116", "eagle", 20, 0.3),
    # found by `fuzz.py` (seed 93, draw 369, vLLM 0.34): a decoder the step before left out (no output in flight)
    # offers the host only the blocks its known tokens hash, with a drafter's lookahead hashes
    "eagle_offload_decoder_fuzz93_0369_k3": ("fuzz93_0369", "eagle", 3, 0.3),
    # ngram drafts on a sliding-window model: windows freed by the tokens processed, drafts in flight
    "ngram_hybrid_contended_k3": ("hybrid_contended", "ngram", 3, 0.6),
    "ngram_hybrid_sessions_k2": ("hybrid_sessions", "ngram", 2, 0.7),
    "ngram_hybrid_drafts_preempted_k20": ("hybrid_drafts_preempted", "ngram", 20, 0.95),
    "eagle_hybrid_contended_k3": ("hybrid_contended", "eagle", 3, 0.6),
    "eagle_hybrid_sessions_k2": ("hybrid_sessions", "eagle", 2, 0.7),
    # a trace's own prefix hashes
    "eagle_hash_units_k3": ("hash_units", "eagle", 3, 0.6),
    "mtp_offload_hash_units_k2": ("offload_hash_units", "mtp", 2, 0.7),
}
ASYNC_OUT = Path(__file__).resolve().parents[2] / "tests" / "sim" / "data" / "vllm_oracle" / "async_spec"


def as_eagle() -> None:
    """Make the driver build vLLM's ``Scheduler`` for an EAGLE drafter (the module docstring)."""
    as_drafter("eagle")


def as_drafter(method: str) -> None:
    """Make the driver build vLLM's ``Scheduler`` and ``AsyncScheduler`` for a ``method`` drafter (``"eagle"`` or
    ``"mtp"``; the module docstring)."""
    import vllm.v1.core.sched.async_scheduler as async_module
    import vllm.v1.core.sched.scheduler as module

    def switched(base):
        class DrafterScheduler(base):
            def __init__(self, *, vllm_config, kv_cache_config, **kwargs) -> None:
                driver.switch_drafter(vllm_config, method)
                assert vllm_config.num_lookahead_tokens == vllm_config.num_speculative_tokens
                assert vllm_config.num_prefill_lookahead_tokens == 1
                # the drafter's layers join the target's one attention group, which vLLM's planner then marks
                # as the drafter's (``get_kv_cache_groups``: ``is_eagle_group`` where ``use_eagle_block_drop()``)
                for group in kv_cache_config.kv_cache_groups:
                    group.is_eagle_group = True
                super().__init__(vllm_config=vllm_config, kv_cache_config=kv_cache_config, **kwargs)

        return DrafterScheduler

    module.Scheduler = switched(module.Scheduler)
    async_module.AsyncScheduler = switched(async_module.AsyncScheduler)


def write_async(name: str, out: Path) -> dict:
    """vLLM's ``AsyncScheduler`` run of ``ASYNC_CASES[name]`` (the drafter switched in first, `as_drafter`), written
    to ``out``: trace, settings, step and request rows, spec decoding counters. Returns the run's totals."""
    import async_gap

    base, method, k, rate = ASYNC_CASES[name]
    out.mkdir(parents=True, exist_ok=True)
    cases.write_trace(base, out / "trace.csv")
    settings = cases.settings(base) | {"num_speculative_tokens": k, "spec_acceptance_rate": rate, "method": method,
                                       "async_scheduling": True}
    (out / "settings.json").write_text(json.dumps(settings, indent=1) + "\n")
    args = cases.driver_args(base, out / "trace.csv", out)
    args.num_speculative_tokens, args.spec_acceptance_rate = k, rate
    totals, _, step_rows, request_rows = async_gap.run_async(args)
    async_gap.write_reference(out, step_rows, request_rows)
    (out / "spec.json").write_text(json.dumps(totals["spec"], indent=1) + "\n")
    return totals


def pool_blocks(available_bytes: int, layers: int, drafter_layers: int, window: int = 0) -> dict:
    """vLLM's ``get_global_kv_cache_groups`` and ``get_kv_cache_configs`` (as ``EngineCore`` calls them) for
    ``layers`` target layers and ``drafter_layers`` drafter layers (``is_draft``) of Llama-2-7B's layout (32 KV
    heads x 128, fp16, 16-token blocks) in ``available_bytes``: the pool's blocks and its groups' layer counts.
    With a ``window``, gpt-oss-20b's layout instead: 8 KV heads x 64, bf16, every other layer (the first
    included) sliding over ``window`` tokens, the drafter's layers full attention."""
    import torch
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    heads, size, dtype = (8, 64, torch.bfloat16) if window else (32, 128, torch.float16)
    spec = FullAttentionSpec(block_size=16, num_kv_heads=heads, head_size=size, dtype=dtype)
    sliding = SlidingWindowSpec(block_size=16, num_kv_heads=heads, head_size=size, dtype=dtype,
                                sliding_window=window) if window else spec
    specs = {f"model.layers.{i}.self_attn.attn": sliding if i % 2 == 0 else spec for i in range(layers)}
    draft = FullAttentionSpec(block_size=16, num_kv_heads=heads, head_size=size, dtype=dtype, is_draft=True)
    specs |= {f"draft_model.layers.{i}.self_attn.attn": draft for i in range(drafter_layers)}
    config = _pool_config()
    groups = get_global_kv_cache_groups(config, [specs])
    kv = get_kv_cache_configs(config, [specs], [available_bytes], groups)[0]
    return {"num_blocks": kv.num_blocks, "group_layers": [len(g.layer_names) for g in kv.kv_cache_groups]}


def _pool_config():
    """A VllmConfig with an EAGLE speculative config (as `as_eagle` makes it) for `pool_blocks`."""
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        ModelConfig,
        SchedulerConfig,
        SpeculativeConfig,
        VllmConfig,
    )

    model = ModelConfig(model=driver._model_dir(4096), skip_tokenizer_init=True, max_model_len=4096, dtype="float16")
    config = VllmConfig(model_config=model, scheduler_config=SchedulerConfig(
        max_num_batched_tokens=2048, max_model_len=4096, is_encoder_decoder=False),
        cache_config=CacheConfig(block_size=16), device_config=DeviceConfig(device="cpu"),
        speculative_config=SpeculativeConfig(method="ngram", num_speculative_tokens=3))
    driver.switch_drafter(config, "eagle")
    config.cache_config.kv_cache_layout = "NHD"  # FlashAttention's (layer-outermost): each layer's page a block
    config.scheduler_config.disable_hybrid_kv_cache_manager = False  # as on a GPU (a CPU platform turns it off)
    return config


POOL = {  # name -> (available bytes, target layers, drafter layers[, window]): kvsim's Llama-2-7B on an H100, and
    # 10 GiB; gpt-oss-20b's 12 sliding and 12 full layers in 10 GiB (with a drafter layer: 12 sliding, 13 full)
    "llama2_7b_h100": (62_599_159_050, 32, 0),
    "llama2_7b_h100_eagle": (62_194_293_050, 32, 1),
    "llama2_7b_10gib": (10 * 2**30, 32, 0),
    "llama2_7b_10gib_eagle": (10 * 2**30, 32, 1),
    "gpt_oss_20b_10gib": (10 * 2**30, 24, 0, 128),
    "gpt_oss_20b_10gib_eagle": (10 * 2**30, 24, 1, 128),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*")
    p.add_argument("--out", default="tests/sim/data/vllm_oracle/spec")
    p.add_argument("--method", choices=["ngram", "eagle"], default="ngram")
    p.add_argument("--pool", action="store_true", help="write OUT/eagle/pool.json (vLLM's pool sizes) instead")
    p.add_argument("--async-scheduling", action="store_true",
                   help="the ASYNC_CASES through vLLM's AsyncScheduler, written to tests/sim/data/vllm_oracle/async_spec")
    a = p.parse_args()
    if a.async_scheduling:
        for name in a.names or list(ASYNC_CASES):
            method = ASYNC_CASES[name][1]
            import vllm.v1.core.sched.async_scheduler as async_module
            import vllm.v1.core.sched.scheduler as module

            bases = module.Scheduler, async_module.AsyncScheduler
            if method != "ngram":
                as_drafter(method)
            try:
                totals = write_async(name, ASYNC_OUT / name)
            finally:
                module.Scheduler, async_module.AsyncScheduler = bases
            print(name, {k: v for k, v in totals.items()}, flush=True)
        return
    if a.pool:
        pool = {name: {"available_bytes": m, "layers": n, "drafter_layers": d, **({"window": w[0]} if w else {}),
                       **pool_blocks(m, n, d, *w)} for name, (m, n, d, *w) in POOL.items()}
        (Path(a.out) / "eagle").mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "eagle" / "pool.json").write_text(json.dumps(pool, indent=1) + "\n")
        return
    table = EAGLE_CASES if a.method == "eagle" else SPEC_CASES
    if a.method == "eagle":
        as_eagle()
    for name in a.names or list(table):
        base, k, rate = table[name]
        out = Path(a.out) / ("eagle" if a.method == "eagle" else "") / name
        out.mkdir(parents=True, exist_ok=True)
        cases.write_trace(base, out / "trace.csv")
        settings = cases.settings(base) | {"num_speculative_tokens": k, "spec_acceptance_rate": rate}
        if a.method == "eagle":
            settings["method"] = "eagle"
        (out / "settings.json").write_text(json.dumps(settings, indent=1) + "\n")
        args = cases.driver_args(base, out / "trace.csv", out)
        args.num_speculative_tokens, args.spec_acceptance_rate = k, rate
        driver.run(args)
        driver.gzip_steps(out)
        print(name, "done", flush=True)


if __name__ == "__main__":
    main()
