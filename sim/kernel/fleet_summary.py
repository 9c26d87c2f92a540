"""A fleet run's tables and summary: per-replica summaries, the fleet summary, the per-replica table text.

The fleet summary has the usual keys (`sim.kernel.summary.build_summary`) over every request of the fleet, then
``replicas``, ``router``, ``load_imbalance`` and ``per_replica`` (one summary per replica, with its own
``prefix_hit_frac`` and ``memory_maps``; the fleet's ``memory_maps`` is their sum, the maps in the fleet's memory
table, where ``memory_snapshots`` counts one replica's moments: every replica has at least one map where there
are moments, a replica idle across them one of its idle pool, `idle_until`). Memory shares, ``mean_running`` and
``max_running`` are per replica: time-weighted over all replicas together over the fleet's whole run (each
replica has the same capacity; one idle early counts as idle, `idle_until`), and the largest batch any replica
ran.
``load_imbalance`` is max / mean of the tokens each replica processed (prefill computed + tokens decoded):
1.0 is a perfectly even fleet.

A request fanned out into child requests (`sim.kernel.parallel_sampling`) is one row of the requests table, its
``replica`` its first child's. Behind ``dp-lb`` (vLLM's front end routes each child, `sim.kernel.routers`) its
children may run on several replicas, so a replica's summary counts the children it ran, each as one request (its
``requests`` the child requests its engine ran, as vLLM's engine counts them: the replicas' sum is the fleet's
samples, not its requests); behind the other routers, which send a request's children together, it counts the
request whole where its children ran.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from sim.kernel.metrics import MEMORY_KEYS, MemoryIntegral, Recorder
from sim.kernel.parallel_sampling import first_children
from sim.kernel.replica import SimResult, requests_frame, tier_summary
from sim.kernel.spec_decode import fleet_spec_summary
from sim.kernel.summary import SHARE_KEYS, build_summary

PER_REPLICA_KEYS = frozenset({*SHARE_KEYS, "block_usage_frac", "token_occupancy_frac", "shared_saved_frac",
                              "cached_frac", "mean_running", "max_running", "kv_capacity_tokens"})
"""The fleet summary's figures of one replica (the module docstring says how each is taken), which its text marks."""

REPLICA_TABLE_KEYS = ("requests", "completed", "rejected", "preemptions", "mean_running", "ttft_p50_s",
                      "ttft_p99_s", "tpot_p50_s", "prefix_hit_frac", "processed_tokens")


def fleet_memory(integrals) -> MemoryIntegral:
    """The replicas' memory integrals summed: shares over the fleet's total capacity-time."""
    total = MemoryIntegral()
    for m in integrals:
        for key in ("time", "running", *MEMORY_KEYS):
            setattr(total, key, getattr(total, key) + getattr(m, key))
        for name, acc in m.groups.items():  # a hybrid pool's per-group integrals
            into = total.groups.setdefault(name, [0.0] * len(acc))
            for i, value in enumerate(acc):
                into[i] += value
    return total


def idle_until(rec: Recorder, b, since: float, end: float, final_map: tuple | None = None) -> None:
    """A replica idle from ``since`` (the end of its last row) to the fleet's ``end``: one idle row, its pool
    as ``b`` leaves it. So every replica's rows and memory integrals span the fleet's run, as its summary's
    ``sim_time_s`` does: a replica that finished early, or never got a request, counts its idle capacity in
    ``mean_running`` and the memory shares, fleet-wide and its own. ``final_map``: its idle pool's memory map,
    where snapshot moments fell in that stretch (`Fleet._engine`), recorded at ``since``: the start of that
    idle row, whose shares it counts, as every map has the step row starting at its time. No row starts at or
    after those moments, and the pool is the same from ``since`` to ``end``: its map at the start of the row that
    holds it is the one a plot of any instant of the stretch finds nearest (at ``end`` an earlier, busy map
    could be nearer), and a moment that fell due at ``since`` already took it (one map there, not two). Where
    ``since`` is ``end`` (no idle row), an idle row of no duration gives the map its row (`close_last_map`)."""
    from sim.kernel.engine import close_last_map, record_idle

    if since < end:
        record_idle(rec, b, since, end)
    if final_map is not None and not (rec.snapshots and rec.snapshots[-1][0] == since):
        rec.snapshot(since, *final_map)
    close_last_map(rec, b, end)


def load_imbalance(processed: list[int]) -> float:
    """max / mean of per-replica processed tokens (1.0 when nothing was processed)."""
    mean = sum(processed) / len(processed) if processed else 0.0
    return max(processed) / mean if mean > 0 else 1.0


def fleet_result(fleet, workload, end: float, extra: dict, served_by: np.ndarray | None = None) -> SimResult:
    """Tables (each with a ``replica`` column) and the fleet summary of a finished `sim.kernel.fleet.Fleet`
    (its replicas, or with ``--workers`` their `fleet_parallel` outcomes), each replica first made idle to
    ``end`` (`idle_until`). ``served_by``: a second replica each request ran on (a P/D fleet's decode replica,
    `sim.kernel.disaggregation`), whose summary counts it too."""
    import pandas as pd

    config, cap, replicas = fleet.config, fleet.cap, fleet.replicas
    for r in replicas:
        idle_until(r.rec, r.memory.breakdown(False), r.end_s, end, r.final_map)
    # summed: a P/D fleet's request is admitted on two replicas, each counting its own hits
    cached_by_index: dict[int, int] = {}
    host_by_index: dict[int, int] = {}
    for r in replicas:
        for totals, mine in ((cached_by_index, r.sched.groups.cached_by_index),
                             (host_by_index, r.sched.groups.host_by_index)):
            for i, tokens in mine.items():
                totals[i] = totals.get(i, 0) + tokens
    requests = requests_frame(workload, fleet.rec, fleet.source.arrival_s, cached_by_index, host_by_index)
    replica_of = fleet.replica_of  # a fanned-out request's: its first child's (`Fleet._route`)
    # each replica's summary over the requests it ran: with a router that routes a fanned-out request's children
    # one by one (dp-lb) they may run on several replicas, so each counts the children it ran, as requests
    mine_of, replica_requests = replica_of, requests
    if getattr(workload, "fan_parent", None) is not None:
        replica_of = replica_of[first_children(workload.fan_parent)]
        if fleet.router.routes_children:
            replica_requests = requests_frame(workload, fleet.rec, fleet.source.arrival_s, cached_by_index,
                                              host_by_index, fold=False)
        else:
            mine_of = replica_of
    # right after trace_row, where it has always been; the hash columns (`sim.kernel.request_hashes`) follow it
    requests.insert(requests.columns.get_loc("trace_row") + 1, "replica", replica_of)
    pool = replicas[0].memory.breakdown()
    total_blocks, capacity = pool.total_blocks, pool.capacity  # a hybrid pool counts group slots
    steps, per_replica, processed = [], [], []
    for r in replicas:
        frame = r.rec.steps_frame(capacity, total_blocks)
        frame.insert(0, "replica", np.full(len(frame), r.number, np.int64))
        steps.append(frame)
        prefill = int(frame["prefill_tokens"].sum())
        tokens = prefill + int((frame["decode_seqs"] * frame["num_steps"]).sum())
        processed.append(tokens)
        mine = mine_of == r.number if served_by is None else (mine_of == r.number) | (served_by == r.number)
        summary = build_summary(allocator=config.allocator, requests=replica_requests[mine],
                                memory=r.rec.memory, max_running=r.rec.max_running,
                                num_preemptions=r.sched.groups.num_preemptions, start_s=fleet.start, end_s=end,
                                wall_time_s=0.0, capacity=capacity, total_blocks=total_blocks, kv_tokens=cap.kv_tokens,
                                prefill_tokens=prefill, cached_prompt_tokens=r.sched.groups.cached_prompt_tokens,
                                tier=tier_summary([(r.memory, r.sched.groups)]),
                                extra={"processed_tokens": tokens, "memory_maps": len(r.rec.snapshots)})
        del summary["wall_time_s"]
        if (spec := r.spec_summary()) is not None:
            summary["spec_decoding"] = spec
        per_replica.append({"replica": r.number, **summary})
    steps_frame = pd.concat(steps, ignore_index=True)
    extra = extra | {"memory_maps": sum(r["memory_maps"] for r in per_replica)}  # after the callers' memory_snapshots
    summary = build_summary(
        allocator=config.allocator, requests=requests, memory=fleet_memory(r.rec.memory for r in replicas),
        max_running=max(r.rec.max_running for r in replicas),
        num_preemptions=sum(r.sched.groups.num_preemptions for r in replicas), start_s=fleet.start, end_s=end,
        wall_time_s=0.0, capacity=capacity, total_blocks=total_blocks, kv_tokens=cap.kv_tokens,
        prefill_tokens=int(steps_frame["prefill_tokens"].sum()),
        cached_prompt_tokens=sum(r.sched.groups.cached_prompt_tokens for r in replicas),
        tier=tier_summary([(r.memory, r.sched.groups) for r in replicas]), extra=extra)
    if "spec_decoding" in per_replica[0]:
        summary["spec_decoding"] = fleet_spec_summary([s["spec_decoding"] for s in per_replica])
    summary.update({"replicas": len(replicas), "router": config.router,
                    "load_imbalance": load_imbalance(processed), "per_replica": per_replica,
                    "api_server_count": config.api_servers})
    memory = partial(fleet_memory_frame, [(r.number, r.rec) for r in replicas])  # built when first read
    return SimResult(requests, steps_frame, memory, summary, config)


def fleet_memory_frame(recorders: list[tuple[int, Recorder]]):
    """The replicas' memory-map snapshots (replica number, its recorder) in one table with a ``replica``
    column; built on first use, holding the recorders only, not the replicas' allocators."""
    import pandas as pd

    memories = []
    for number, rec in recorders:
        memory = rec.memory_frame()
        memory.insert(0, "replica", np.full(len(memory), number, np.int64))
        memories.append(memory)
    return pd.concat(memories, ignore_index=True)


def format_replicas(per_replica: list[dict]) -> str:
    """One line per replica: its number and the `REPLICA_TABLE_KEYS` of its summary."""
    header = ["replica", *REPLICA_TABLE_KEYS]
    rows = [header]
    for s in per_replica:
        cells = [str(s["replica"])]
        for key in REPLICA_TABLE_KEYS:
            v = s.get(key)
            cells.append("-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v))
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
