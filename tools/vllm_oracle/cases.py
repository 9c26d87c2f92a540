"""The harness's cases: a small synthetic trace and the vLLM settings each one exercises.

Each case is run by vLLM's real scheduler (`driver.py`, in a venv with vLLM) and by kvsim (`compare.py`, or
``tests/sim/test_sim_vllm_parity.py`` from the committed reference outputs) with the same settings: ``num_blocks``
blocks of ``block_size`` tokens (kvsim: ``--kv-tokens num_blocks * block_size``), one engine step per second;
``cpu_offload_blocks`` host blocks behind vLLM's offloading connector (kvsim: a write-through tier of as many
blocks, loads beside the steps).
"""

from __future__ import annotations

import csv
from pathlib import Path
from types import SimpleNamespace

import numpy as np

CASES: dict[str, dict] = {
    # name: trace parameters, then scheduler settings (vLLM names)
    "contended": dict(trace=dict(n=200, prompt=(50, 600), output=(20, 300), gap=0.5), num_blocks=120),
    "ample": dict(trace=dict(n=150, prompt=(50, 600), output=(20, 300), gap=0.5), num_blocks=4000),
    "shared_prefix_cached": dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5, groups=3),
                                 num_blocks=300),
    "shared_prefix_uncached": dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5, groups=3),
                                   num_blocks=300, enable_prefix_caching=False),
    "long_prompts_2048": dict(trace=dict(n=40, prompt=(3000, 9000), output=(10, 100), gap=4), num_blocks=2000,
                              max_num_batched_tokens=2048),
    "long_prompts_8192": dict(trace=dict(n=40, prompt=(3000, 9000), output=(10, 100), gap=2), num_blocks=2000,
                              max_num_batched_tokens=8192),
    "max_num_seqs": dict(trace=dict(n=120, prompt=(20, 400), output=(20, 200), gap=0.3), num_blocks=4000,
                         max_num_seqs=8),
    # a trace's own prefix hashes (Mooncake's hash_ids): units of 64 tokens (four blocks) and of 40 (a block
    # ends inside a unit, a unit inside a block)
    "hash_units": dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5, hash_units=64),
                       num_blocks=300),
    "hash_units_40": dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5, hash_units=40),
                          num_blocks=250),
    "block_size_32": dict(trace=dict(n=200, prompt=(50, 600), output=(20, 300), gap=0.5), num_blocks=60,
                          block_size=32),
    "offline_burst": dict(trace=dict(n=150, prompt=(50, 600), output=(20, 300), gap=0.0), num_blocks=150),
    "long_prefill_threshold": dict(trace=dict(n=100, prompt=(50, 3000), output=(10, 150), gap=1.0),
                                   num_blocks=600, long_prefill_token_threshold=256),
    "small_budget_threshold": dict(trace=dict(n=120, prompt=(30, 2000), output=(10, 150), gap=0.5),
                                   num_blocks=3000,
                                   max_num_batched_tokens=512, max_num_seqs=64, long_prefill_token_threshold=128),
    "reserve_full_isl_off": dict(trace=dict(n=100, prompt=(200, 2500), output=(10, 200), gap=0.7),
                                 num_blocks=250, scheduler_reserve_full_isl=False),
    "priority": dict(trace=dict(n=200, prompt=(50, 600), output=(20, 300), gap=0.5, priorities=4),
                     num_blocks=120, scheduling_policy="priority"),
    # priority under heavier contention than "priority" (104 preemptions over 12,564 steps), two levels
    "priority_contended": dict(trace=dict(n=150, prompt=(20, 800), output=(100, 500), gap=3, priorities=2),
                               num_blocks=150, scheduling_policy="priority"),
    # open-loop sessions: a turn arrives while the previous one may still decode, and hits its generated blocks
    "sessions_open_loop": dict(trace=dict(n=40, prompt=(50, 300), output=(20, 150), gap=3.0, turns=3,
                                          turn_gap=(5, 60)), num_blocks=150),
    # rows an earlier finish releases (`releases.py`): session turns sent a whole number of steps after the turn
    # before finished, and a closed loop of users each sending its next request after its last one's reply
    "sessions_released": dict(trace=dict(n=40, prompt=(50, 300), output=(20, 150), gap=3.0, turns=3,
                                         think=(0, 20)), num_blocks=150),
    "closed_loop": dict(trace=dict(n=150, prompt=(50, 600), output=(20, 300), gap=0.0, users=24, think=2),
                        num_blocks=200),
    "closed_loop_priority": dict(trace=dict(n=150, prompt=(20, 800), output=(100, 400), gap=0.0, users=40,
                                            priorities=3), num_blocks=150, scheduling_policy="priority"),
    # vLLM's OffloadingConnector (CPU, LRU, prompt blocks only) behind a small GPU: sessions whose earlier turns
    # come back from host memory, loaded asynchronously (kvsim: --offload-write-policy write_through
    # --offload-loads async), with preemptions
    "offload_sessions": dict(trace=dict(n=40, prompt=(50, 300), output=(20, 150), gap=3.0, turns=3,
                                        turn_gap=(5, 60)), num_blocks=100, cpu_offload_blocks=400),
    # the same connector with shared system prompts that the GPU evicts between uses, and a host that evicts too
    "offload_shared_prefix": dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5, groups=3),
                                  num_blocks=120, cpu_offload_blocks=150),
    # a trace's own prefix hashes behind the connector (ARC), generated blocks stored too
    "offload_hash_units": dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5, hash_units=64),
                               trace_of="hash_units", num_blocks=120, cpu_offload_blocks=150,
                               offload_eviction_policy="arc", offload_prompt_only=False),
    # the same connector with vLLM's ARC policy (kvsim: --offload-eviction-policy arc): a host too small for the
    # sessions, so T1 and T2 both evict and the ghost lists move T1's target
    "offload_arc_sessions": dict(trace=dict(n=40, prompt=(50, 300), output=(20, 150), gap=3.0, turns=3,
                                            turn_gap=(5, 60)), num_blocks=100, cpu_offload_blocks=120,
                                 offload_eviction_policy="arc"),
    "offload_arc_shared_prefix": dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5, groups=3),
                                      num_blocks=120, cpu_offload_blocks=100, offload_eviction_policy="arc"),
    # its trace on a smaller GPU and host: requests finishing in one step free their blocks in running order,
    # which after preemptions is not arrival order, and decides which cached system-prompt blocks survive
    "offload_arc_small_gpu": dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5, groups=3),
                                  trace_of="offload_arc_shared_prefix", num_blocks=90, cpu_offload_blocks=40,
                                  offload_eviction_policy="arc"),
    # sessions whose generated blocks are stored too (vLLM's offload_prompt_only off; kvsim:
    # --no-offload-prompt-only): a decode that fills a block offers it
    "offload_generated_blocks": dict(trace=dict(n=40, prompt=(50, 300), output=(20, 150), gap=3.0, turns=3,
                                                turn_gap=(5, 60)), trace_of="offload_arc_sessions", num_blocks=100,
                                     cpu_offload_blocks=400, offload_prompt_only=False),
    # whole prompts repeated (a group's members all send its prompt, a whole number of blocks long) behind a
    # write-through host tier: vLLM's connector looks the host up to the prompt's end, so a prompt whose
    # blocks are all cached loads its last block (or more) from the host and recomputes only its last token
    "offload_whole_prompts": dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5, groups=4,
                                             whole_prompts=True), num_blocks=120, cpu_offload_blocks=200),
    # requests sampled n > 1 times, which vLLM v1's engine fans out into n requests (kvsim: --parallel-sampling
    # fan-out): each child admitted and preempted alone, the prompt shared through the prefix cache
    "parallel_sampling": dict(trace=dict(n=120, prompt=(50, 600), output=(20, 300), gap=1.0, samples=(1, 2, 4, 8)),
                              num_blocks=300, parallel_sampling="fan-out"),
    # the same under the priority policy, some requests sampled more than ten times: vLLM orders a request's
    # children by their ids ("{k}_{row}") as strings, so child 10 comes before child 2
    "parallel_sampling_priority": dict(trace=dict(n=100, prompt=(50, 600), output=(20, 300), gap=1.5,
                                                  samples=(1, 2, 12, 16), priorities=3),
                                       num_blocks=400, parallel_sampling="fan-out", scheduling_policy="priority"),
    # outputs that run past max_model_len: vLLM's scheduler stops a request whose tokens reach it
    # (FINISHED_LENGTH_CAPPED); kvsim cuts its output there (--over-length cap, the default)
    "max_model_len_capped": dict(trace=dict(n=150, prompt=(50, 1000), output=(20, 600), gap=0.5), num_blocks=150,
                                 max_model_len=1024),
    # vLLM's hybrid KV cache manager: a sliding-window group (window 128) beside a full-attention one, one pool
    # (kvsim: gpt-oss-20b, whose 12 window and 12 full layers are these two groups). Prompts many windows long,
    # prefilled in chunks: the window group frees what each chunk leaves behind, and admission counts its share
    # of a whole prompt up to its admission cap (cdiv(127 + 512, 16) + 1 = 41 blocks)
    "hybrid_long_prompts": dict(trace=dict(n=60, prompt=(200, 3000), output=(10, 200), gap=2.0), num_blocks=500,
                                max_num_batched_tokens=512, sliding_window=128),
    # the same manager with shared system prompts: a window group hits on the last blocks before a prefix's end
    # the same manager under contention: decodes that outgrow the pool preempt, window groups free as they go
    "hybrid_contended": dict(trace=dict(n=200, prompt=(50, 600), output=(20, 300), gap=0.5), num_blocks=150,
                             sliding_window=128),
    "hybrid_shared_prefix": dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5, groups=3),
                                 num_blocks=240, sliding_window=128),
    # the hybrid manager (a window group of 128 beside a full one) in the settings of the full-attention cases,
    # most on their traces (``trace_of``) with a pool a little larger for the window group's blocks.
    # Sessions whose later turns hit the earlier turns' generated blocks, which needs the window group to hold
    # the blocks just before the hit's end
    "hybrid_sessions": dict(trace=dict(n=40, prompt=(50, 300), output=(20, 150), gap=3.0, turns=3,
                                       turn_gap=(5, 60)), trace_of="sessions_open_loop", num_blocks=700,
                            sliding_window=128),
    # admission tests the first chunk only; at its final length a request holds its full group's blocks and a
    # window's, not the window group's capped prompt share (kvsim added that and rejected 3 of these 100)
    "hybrid_reserve_full_isl_off": dict(trace=dict(n=100, prompt=(200, 2500), output=(10, 200), gap=0.7),
                                        trace_of="reserve_full_isl_off", num_blocks=300,
                                        scheduler_reserve_full_isl=False, sliding_window=128),
    "hybrid_long_prefill_threshold": dict(trace=dict(n=100, prompt=(50, 3000), output=(10, 150), gap=1.0),
                                          trace_of="long_prefill_threshold", num_blocks=700,
                                          long_prefill_token_threshold=256, sliding_window=128),
    # chunks of 128 that outgrow the pool: a refused chunk still frees the blocks its window left, before the
    # preemption frees the victim's, and that order decides which cached blocks later allocations evict
    "hybrid_small_budget_threshold": dict(trace=dict(n=120, prompt=(30, 2000), output=(10, 150), gap=0.5),
                                          trace_of="small_budget_threshold", num_blocks=400,
                                          max_num_batched_tokens=512, max_num_seqs=64,
                                          long_prefill_token_threshold=128, sliding_window=128),
    "hybrid_priority": dict(trace=dict(n=200, prompt=(50, 600), output=(20, 300), gap=0.5, priorities=4),
                            trace_of="priority", num_blocks=150, scheduling_policy="priority", sliding_window=128),
    "hybrid_priority_contended": dict(trace=dict(n=150, prompt=(20, 800), output=(100, 500), gap=3, priorities=2),
                                      trace_of="priority_contended", num_blocks=170, scheduling_policy="priority",
                                      sliding_window=128),
    # long prompts with long outputs: admission counts a window group's share up to its cap (137 blocks at
    # 2048, 521 at 8192), decoding holds 9, so only outputs of thousands of tokens preempt
    "hybrid_long_prompts_2048": dict(trace=dict(n=16, prompt=(2000, 6000), output=(1000, 3000), gap=2),
                                     num_blocks=1100, max_num_batched_tokens=2048, sliding_window=128),
    "hybrid_long_prompts_8192": dict(trace=dict(n=16, prompt=(2000, 6000), output=(1000, 3000), gap=2),
                                     trace_of="hybrid_long_prompts_2048", num_blocks=1200,
                                     max_num_batched_tokens=8192, sliding_window=128),
    "hybrid_block_size_32": dict(trace=dict(n=200, prompt=(50, 600), output=(20, 300), gap=0.5),
                                 trace_of="block_size_32", num_blocks=75, block_size=32, sliding_window=128),
    # a block longer than the window: a window group keeps at most the two blocks the window spans
    "hybrid_block_size_256": dict(trace=dict(n=200, prompt=(50, 600), output=(20, 300), gap=0.5),
                                  trace_of="block_size_32", num_blocks=14, block_size=256, sliding_window=128),
    "hybrid_offline_burst": dict(trace=dict(n=150, prompt=(50, 600), output=(20, 300), gap=0.0),
                                 trace_of="offline_burst", num_blocks=190, sliding_window=128),
    "hybrid_max_num_seqs": dict(trace=dict(n=120, prompt=(20, 400), output=(20, 200), gap=0.3),
                                trace_of="max_num_seqs", num_blocks=200, max_num_seqs=8, sliding_window=128),
    "hybrid_shared_prefix_uncached": dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5, groups=3),
                                          trace_of="hybrid_shared_prefix", num_blocks=240,
                                          enable_prefix_caching=False, sliding_window=128),
    "hybrid_max_model_len_capped": dict(trace=dict(n=150, prompt=(50, 1000), output=(20, 600), gap=0.5),
                                        trace_of="max_model_len_capped", num_blocks=180, max_model_len=1024,
                                        sliding_window=128),
    "hybrid_parallel_sampling": dict(trace=dict(n=120, prompt=(50, 600), output=(20, 300), gap=1.0,
                                                samples=(1, 2, 4, 8)),
                                     trace_of="parallel_sampling", num_blocks=350, parallel_sampling="fan-out",
                                     sliding_window=128),
    # vLLM's periodic sliding-window retention: besides the blocks before a prompt's end and a shared prefix's, a
    # window group keeps the 8 blocks (window 128) that end every 256-token segment, which later turns can hit
    "hybrid_retention_interval_256": dict(trace=dict(n=40, prompt=(50, 300), output=(20, 150), gap=3.0, turns=3,
                                                     turn_gap=(5, 60)), trace_of="sessions_open_loop", num_blocks=700,
                                          sliding_window=128, prefix_cache_retention_interval=256),
    # found by ``fuzz.py``: a request whose host hits were loaded beside the steps is scheduled through the same
    # admission gate as any waiting one (allocate_slots with full_sequence_must_fit): its whole sequence must
    # fit, not only the long-prefill threshold's first chunk (kvsim admitted it, then preempted)
    "offload_long_prefill_threshold": dict(trace=dict(n=20, prompt=(256, 641), output=(41, 163), gap=0.0),
                                           num_blocks=125, cpu_offload_blocks=1000,
                                           long_prefill_token_threshold=128),
    # found by ``fuzz.py``, for its async reference: whole prompts repeated, so a request's host lookup reaches
    # the block a step before stored; under async scheduling that store is reported written a step late, and
    # vLLM defers the request while its chunk is HIT_PENDING
    "offload_whole_prompts_few": dict(trace=dict(n=24, prompt=(300, 700), output=(10, 60), gap=0.5, groups=2,
                                                 whole_prompts=True), num_blocks=300, cpu_offload_blocks=300),
    # found by ``fuzz.py``: a request's loaded host hits are cached when vLLM's waiting loop reaches it, after the
    # running loop has cached what its sibling (the same prompt, sampled twice or more) computes this step, so a
    # hash both hold is found in the sibling's block: one fewer free block to take when a later lookup hits it
    "offload_parallel_sampling_threshold": dict(trace=dict(n=20, prompt=(92, 672), output=(58, 137), gap=10.0,
                                                           samples=(2, 5)),
                                                num_blocks=53, cpu_offload_blocks=22, parallel_sampling="fan-out",
                                                max_num_batched_tokens=128, max_num_seqs=32,
                                                long_prefill_token_threshold=16),
    # found by ``fuzz.py``: vLLM's watermark (``SchedulerConfig.watermark``, kvsim ``--watermark``) holds for a
    # request whose host hits were loaded as for any waiting one: its first chunk must leave it free
    "offload_sessions_watermark": dict(trace=dict(n=7, prompt=(237, 471), output=(37, 89), gap=0.0, turns=4,
                                                  turn_gap=(8, 21)),
                                       num_blocks=286, cpu_offload_blocks=539, max_num_batched_tokens=256,
                                       scheduler_reserve_full_isl=False, watermark=0.1),
    # for its async reference: decoders filling a full pool, in a running order that preemptions took away from
    # admission order; vLLM's running loop stops at the first one in running order that finds no room and no
    # victim it may preempt (the victim's step is in flight), so a decode run grows a step's due decoders whole
    "offload_full_pool_decoders": dict(trace=dict(n=80, prompt=(50, 300), output=(100, 600), gap=0.1),
                                       num_blocks=150, cpu_offload_blocks=300, max_num_batched_tokens=512),
    # found by ``fuzz.py`` (seed 13, draw 16; its trace seeded by the draw's name), for its async reference: vLLM
    # lifts the long-prefill threshold only when one request is in, counting those holding KV for a host load
    # (``get_request_counts``); kvsim counted the queue only, and gave a lone running request 526 tokens at once
    "offload_arc_sessions_priority_threshold": dict(trace=dict(n=7, prompt=(105, 170), output=(81, 88), gap=3.0,
                                                               turns=3, turn_gap=(9, 53)),
                                                    trace_of="fuzz13_0016", num_blocks=67, cpu_offload_blocks=20,
                                                    offload_eviction_policy="arc", scheduling_policy="priority",
                                                    max_num_seqs=2, scheduler_reserve_full_isl=False,
                                                    max_model_len=857, long_prefill_token_threshold=16),
    # found by ``fuzz.py`` (seed 95, draw 448), for its async reference: fanned-out samples whose prefill ended a
    # step before a running loop that stopped at a victim it may not preempt (its blocks wait for a store): a decoder
    # that step left out holds no slot of its own, so the last block it holds, all prompt, is hashed (kvsim hid it
    # from the cache while admissions looked it up, and cached it again behind a later twin: a later lookup took
    # the twin a running request holds instead of the free first one, and admitted where vLLM had no room)
    "offload_fanout_halted_decoders": dict(trace=dict(n=34, prompt=(320, 587), output=(37, 257), samples=(2, 5),
                                                      gap=0.1),
                                           trace_of="fuzz95_0448", parallel_sampling="fan-out", num_blocks=56,
                                           cpu_offload_blocks=118, offload_eviction_policy="arc",
                                           offload_prompt_only=False, long_prefill_token_threshold=128,
                                           max_num_batched_tokens=256),
    # found by ``fuzz.py``, for its speculative reference (``spec_cases.py``, 20 drafts): a threshold below a
    # verification's 1 + 20 tokens caps it, drafts included
    "threshold_16_contended": dict(trace=dict(n=16, prompt=(141, 716), output=(104, 162), gap=0.0), num_blocks=72,
                                   max_num_batched_tokens=1024, max_num_seqs=8, long_prefill_token_threshold=16),
    # vLLM's hybrid KV cache manager on Llama 4's chunked-local attention (kvsim: llama-4-scout-17b-16e, its chunk
    # set to the case's): three chunked groups beside the full one. A chunked group frees every block of the
    # chunks before a token's own at once, admission caps its share at cdiv(chunk + budget, block) blocks, and a
    # hit needs only the blocks of the chunk its next token is in (the ones before are nulls)
    "chunked_long_prompts": dict(trace=dict(n=60, prompt=(200, 3000), output=(10, 200), gap=2.0),
                                 trace_of="hybrid_long_prompts", num_blocks=900, max_num_batched_tokens=512,
                                 attention_chunk_size=128),
    "chunked_contended": dict(trace=dict(n=200, prompt=(50, 600), output=(20, 300), gap=0.5),
                              trace_of="hybrid_contended", num_blocks=300, attention_chunk_size=128),
    "chunked_shared_prefix": dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5, groups=3),
                                  trace_of="hybrid_shared_prefix", num_blocks=480, attention_chunk_size=128),
    "chunked_sessions": dict(trace=dict(n=40, prompt=(50, 300), output=(20, 150), gap=3.0, turns=3,
                                        turn_gap=(5, 60)), trace_of="sessions_open_loop", num_blocks=1000,
                             attention_chunk_size=256),
    "chunked_priority_contended": dict(trace=dict(n=150, prompt=(20, 800), output=(100, 500), gap=3, priorities=2),
                                       trace_of="priority_contended", num_blocks=300, scheduling_policy="priority",
                                       attention_chunk_size=64, long_prefill_token_threshold=128),
    # vLLM 0.34's cache-aware admission (``cache_aware_admission_window``): once the pool is used past the
    # threshold, the never-run requests among the first N waiting are admitted deepest cached prefix first
    "cache_aware_shared_prefix": dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5, groups=3),
                                      trace_of="shared_prefix_cached", num_blocks=150,
                                      cache_aware_admission_window=16),
    "cache_aware_hash_units": dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5, hash_units=64),
                                   trace_of="hash_units", num_blocks=140, cache_aware_admission_window=8,
                                   cache_aware_admission_threshold=0.0),
    "cache_aware_sessions": dict(trace=dict(n=40, prompt=(50, 300), output=(20, 150), gap=3.0, turns=3,
                                            turn_gap=(5, 60)), trace_of="sessions_open_loop", num_blocks=100,
                                 cache_aware_admission_window=4, cache_aware_admission_threshold=0.3),
    # host hits do not count: vLLM consults its GPU prefix cache only
    "cache_aware_offload": dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5, hash_units=64),
                                trace_of="hash_units", num_blocks=120, cpu_offload_blocks=150,
                                cache_aware_admission_window=32, cache_aware_admission_threshold=0.2),
    "hybrid_cache_aware_shared_prefix": dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5,
                                                        groups=3),
                                             trace_of="hybrid_shared_prefix", num_blocks=200, sliding_window=128,
                                             cache_aware_admission_window=16),
    # the prefill cadence (``prefill_schedule_interval``): prefill held to one step in N while something decodes,
    # unless the last admission round left requests waiting; running chunks held too (`sim.kernel.prefill_cadence`)
    "cadence_ample": dict(trace=dict(n=150, prompt=(50, 600), output=(20, 300), gap=0.5), trace_of="ample",
                          num_blocks=4000, prefill_schedule_interval=4),
    "cadence_long_prompts": dict(trace=dict(n=60, prompt=(200, 3000), output=(10, 200), gap=12.0),
                                 trace_of="hybrid_long_prompts", num_blocks=500, max_num_batched_tokens=512,
                                 prefill_schedule_interval=3),
    "cadence_contended": dict(trace=dict(n=200, prompt=(50, 600), output=(20, 300), gap=0.5), trace_of="contended",
                              num_blocks=120, prefill_schedule_interval=4),
    "cadence_shared_prefix": dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5, groups=3),
                                  trace_of="shared_prefix_cached", num_blocks=300, prefill_schedule_interval=8,
                                  long_prefill_token_threshold=64, long_prefill_token_threshold_adaptive=True),
    "cadence_offload": dict(trace=dict(n=150, prompt=(300, 700), output=(10, 150), gap=0.5, hash_units=64),
                            trace_of="hash_units", num_blocks=120, cpu_offload_blocks=150, prefill_schedule_interval=4),
    "cadence_priority": dict(trace=dict(n=150, prompt=(20, 800), output=(100, 500), gap=12, priorities=2),
                             trace_of="priority_contended", num_blocks=150, scheduling_policy="priority",
                             prefill_schedule_interval=3),
    "cadence_sessions": dict(trace=dict(n=40, prompt=(50, 300), output=(20, 150), gap=3.0, turns=3,
                                        turn_gap=(5, 60)), trace_of="sessions_open_loop", num_blocks=150,
                             prefill_schedule_interval=5),
    "hybrid_cadence_long_prompts": dict(trace=dict(n=60, prompt=(200, 3000), output=(10, 200), gap=12.0),
                                        trace_of="hybrid_long_prompts", num_blocks=500, max_num_batched_tokens=512,
                                        sliding_window=128, prefill_schedule_interval=3),
    # admissions capped below max_num_seqs (``max_num_active_seqs``), under the priority policy's preemptions
    "active_seqs_priority": dict(trace=dict(n=150, prompt=(20, 800), output=(100, 500), gap=3, priorities=2),
                                 trace_of="priority_contended", num_blocks=100, scheduling_policy="priority",
                                 max_num_active_seqs=4),
    # the long-prefill threshold floored at a fair share of the budget (``long_prefill_token_threshold_adaptive``)
    "adaptive_threshold_contended": dict(trace=dict(n=200, prompt=(50, 600), output=(20, 300), gap=0.5),
                                         trace_of="contended", num_blocks=120, long_prefill_token_threshold=32,
                                         long_prefill_token_threshold_adaptive=True),
}
# vLLM's dense sliding-window retention (``--prefix-cache-retention-interval None``: a window group caches every
# full block, as before vLLM 0.33 made 0 the default) on the hybrid cases whose outputs it changes
DENSE = ("hybrid_long_prompts_2048", "hybrid_long_prompts_8192", "hybrid_contended", "hybrid_shared_prefix",
         "hybrid_sessions", "hybrid_reserve_full_isl_off", "hybrid_long_prefill_threshold",
         "hybrid_small_budget_threshold", "hybrid_priority", "hybrid_priority_contended", "hybrid_block_size_32",
         "hybrid_block_size_256", "hybrid_offline_burst", "hybrid_max_num_seqs", "hybrid_max_model_len_capped",
         "hybrid_parallel_sampling")
CASES |= {f"{name}_dense": CASES[name] | dict(trace_of=CASES[name].get("trace_of", name),
                                             prefix_cache_retention_interval=None) for name in DENSE}
DEFAULTS = dict(block_size=16, max_num_batched_tokens=2048, max_num_seqs=256, enable_prefix_caching=True,
                long_prefill_token_threshold=0, scheduler_reserve_full_isl=True, scheduling_policy="fcfs",
                max_model_len=16384)


def settings(name: str) -> dict:
    """The case's scheduler settings, defaults filled in."""
    case = CASES[name]
    return DEFAULTS | {k: v for k, v in case.items() if k not in ("trace", "trace_of")}


def driver_args(name: str, trace: Path, out: Path | None = None) -> SimpleNamespace:
    """`driver.run`'s arguments for the case, its trace at ``trace`` (what the driver's command line parses)."""
    s = settings(name)
    return SimpleNamespace(trace=str(trace), out=str(out), num_blocks=s["num_blocks"], block_size=s["block_size"],
                           max_num_batched_tokens=s["max_num_batched_tokens"], max_num_seqs=s["max_num_seqs"],
                           max_model_len=s["max_model_len"],
                           long_prefill_token_threshold=s["long_prefill_token_threshold"],
                           prefix_caching=s["enable_prefix_caching"],
                           scheduler_reserve_full_isl=s["scheduler_reserve_full_isl"],
                           scheduling_policy=s["scheduling_policy"], watermark=s.get("watermark", 0.0), seed=0,
                           max_steps=200_000,
                           cpu_offload_blocks=s.get("cpu_offload_blocks", 0),
                           offload_prompt_only=s.get("offload_prompt_only", True),
                           offload_eviction_policy=s.get("offload_eviction_policy", "lru"),
                           sliding_window=s.get("sliding_window", 0),
                           attention_chunk_size=s.get("attention_chunk_size", 0),
                           prefix_cache_retention_interval=s.get("prefix_cache_retention_interval", 0),
                           cache_aware_admission_window=s.get("cache_aware_admission_window", 0),
                           cache_aware_admission_threshold=s.get("cache_aware_admission_threshold", 0.5),
                           prefill_schedule_interval=s.get("prefill_schedule_interval", 1),
                           max_num_active_seqs=s.get("max_num_active_seqs"),
                           long_prefill_token_threshold_adaptive=s.get("long_prefill_token_threshold_adaptive", False))


def write_trace(name: str, path: Path, seed: int = 0) -> None:
    """A kvsim canonical CSV: whole-step arrivals (first at 0), uniform lengths, optional groups/priorities,
    or sessions (``turns``)."""
    spec = CASES[name]["trace"]
    name = CASES[name].get("trace_of", name)  # a case may rerun another's trace with other settings
    rng = np.random.default_rng([seed, sum(map(ord, name))])
    if spec.get("turns"):
        _write_sessions(spec, rng, path)
        return
    n = spec["n"]
    gaps = rng.exponential(spec["gap"], n) if spec["gap"] else np.zeros(n)
    gaps[0] = 0
    arrivals = np.floor(np.cumsum(gaps)).astype(int)
    prompts = rng.integers(spec["prompt"][0], spec["prompt"][1] + 1, n)
    outputs = rng.integers(spec["output"][0], spec["output"][1] + 1, n)
    header = ["arrival_time_s", "prompt_tokens", "output_tokens"]
    groups = spec.get("groups", 0)
    if groups:
        header += ["prefix_group", "prefix_len"]
        lens = rng.integers(100, 260, groups)
        if spec.get("whole_prompts"):  # a member's prompt is its group's prefix, a whole number of blocks
            lens = 16 * rng.integers(6, 30, groups)
    if spec.get("priorities"):
        header.append("priority")
    if spec.get("samples"):
        header.append("n")
    if spec.get("users"):  # a closed loop (`releases.py`): arrival times are only an order
        header += ["closed_loop_users", "think_time_s"]
        arrivals[:] = 0
    if spec.get("hash_units"):  # a trace's own prefix hashes (Mooncake's hash_ids), one per unit of its prompt
        header += ["prefix_hashes", "prefix_hash_tokens"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for i in range(n):
            row = [int(arrivals[i]), int(prompts[i]), int(outputs[i])]
            if groups:
                g = int(rng.integers(0, groups + 1))  # one in groups + 1 has no shared prefix
                row += [f"system-{chr(97 + g)}", int(lens[g])] if g < groups else ["", ""]
                if g < groups and spec.get("whole_prompts"):
                    row[1] = int(lens[g])
            if spec.get("priorities"):
                row.append(int(rng.integers(0, spec["priorities"])))
            if spec.get("samples"):
                row.append(int(rng.choice(spec["samples"])))
            if spec.get("users"):
                row += [spec["users"], spec.get("think", 0)]
            if spec.get("hash_units"):
                row += [_unit_hashes(rng, row[1], spec["hash_units"]), spec["hash_units"]]
            w.writerow(row)


def _unit_hashes(rng: np.random.Generator, prompt: int, unit: int) -> str:
    """A prompt's hash ids, one per ``unit`` tokens (the last unit partial), as a CSV cell (``0 1 2``): unit ``u``'s
    id one of ``u + 1`` (the first unit shared by every prompt, later ones ever less), so prompts share prefixes of
    every length; an id means the same tokens only after the same ids (kvsim chains them, the driver too)."""
    return " ".join(str(int(rng.integers(0, u + 1))) for u in range(-(-prompt // unit)))


def _write_sessions(spec: dict, rng: np.random.Generator, path: Path) -> None:
    """``n`` sessions of ``turns`` turns, open loop: a session starts ``gap`` steps (exponential) after the
    previous one, each later turn ``turn_gap`` steps (uniform) after the one before, whether or not it has
    finished; a turn's prompt is the previous turn's prompt and output plus a new message of ``prompt`` tokens.
    With ``think`` (a range of whole steps) each later turn is released instead by the previous turn's finish,
    that many steps after it (``think_time_s``; its ``arrival_time_s``, the session's start, is not read)."""
    rows = []
    start = 0.0
    released = spec.get("think")
    for session in range(spec["n"]):
        start += rng.exponential(spec["gap"]) if session else 0.0
        arrival, prompt, output = int(start), 0, 0
        for turn in range(spec["turns"]):
            think = ""
            if turn and released:
                think = int(rng.integers(released[0], released[1] + 1))
            elif turn:
                arrival += int(rng.integers(spec["turn_gap"][0], spec["turn_gap"][1] + 1))
            prompt += output + int(rng.integers(spec["prompt"][0], spec["prompt"][1] + 1))
            output = int(rng.integers(spec["output"][0], spec["output"][1] + 1))
            rows.append((arrival, session, turn, prompt, output, think))
    rows.sort()
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["arrival_time_s", "prompt_tokens", "output_tokens", "session_id", "turn"]
                   + (["think_time_s"] if released else []))
        for arrival, session, turn, prompt, output, think in rows:
            w.writerow([arrival, prompt, output, session, turn] + ([think] if released else []))
