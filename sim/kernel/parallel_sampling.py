"""Parallel sampling as vLLM v1 runs it (``--parallel-sampling fan-out``, what the default ``auto`` does on `paged`):
a request sampled ``n`` times is ``n`` requests to the scheduler, which share their prompt through the prefix cache.

vLLM v1's engine front end (``LLMEngine.add_request``, ``ParentRequest``) hands the scheduler ``n`` child requests
with the same prompt, one after another. The scheduler admits, preempts and finishes each on its own; the first
child admitted computes the prompt and caches its full blocks as it allocates them, so the children admitted
after it, in the same step or later, hit those blocks and compute only the prompt's last, partly filled block
(at least its last token); each child's generated blocks are its own. kvsim's own model (``fork``, vLLM v0's and
the paper's, and what every other allocator runs) keeps the ``n`` sequences of a request together as
one group: admitted only if all fit, forked at the first token (full blocks shared, the partial one copied),
preempted together::

    fork:     [prompt once] -> fork x n      one group: all or none admitted, preempted together
    fan-out:  child 0 [prompt]               n requests: each admitted and preempted alone,
              child 1 [hits .. last block]   the prompt's full blocks shared through the prefix cache
              ...

Here the fan-out is made on the workload: each row sampled ``n > 1`` times (no beam) becomes ``n`` rows sampled
once, in its place, marked with the row they came from (``Workload.fan_parent``), so the scheduler, the decode
fast-forward and the memory maps see plain requests. Siblings share their whole prompt's block ids (the arrival
source gives them the ids of the row they came from) and own their generated blocks. The requests table has one
row per request again (`aggregate`): the children's hits and preemptions summed, the first child's first token,
the last child's finish.
"""

from __future__ import annotations

import numpy as np

from sim.kernel.arrivals import releases_arrivals
from sim.kernel.over_length import cap_outputs

PARALLEL_SAMPLING = ("auto", "fan-out", "fork")
"""``--parallel-sampling`` values: ``fork`` (kvsim's sequence groups, vLLM v0's and the paper's), ``fan-out``
(vLLM v1's child requests), ``auto`` (the default: fan-out where it is modelled, `paged` without sessions or a
closed loop, as `paged` is vLLM v1's; fork elsewhere)."""


def as_run(config, workload):
    """The workload a run of ``config`` (a `SimConfig`) simulates: ``workload`` with its outputs cut at
    ``max_model_len`` as vLLM stops them (`sim.kernel.over_length`, under ``--over-length cap``), then fanned out
    on `paged` (elsewhere a ``fan-out`` asked for is reported ignored, `sim.kernel.ignored_settings`) when some
    request is sampled more than once without a beam, unless it has sessions or a closed loop (``auto`` then
    forks; ``fan-out`` asked for is refused); a fanned-out workload is returned as it is. In a fleet a request's children go where its first
    goes (`sim.kernel.fleet`): a router sends the request to one server, which fans it out; except behind
    ``dp-lb``, vLLM's own front end, which fans it out first and routes each child (`sim.kernel.routers`)."""
    workload = cap_outputs(config, workload)
    if (getattr(workload, "fan_parent", None) is not None or config.parallel_sampling == "fork"
            or config.allocator != "paged" or not _sampled(workload).any()):
        return workload
    if releases_arrivals(workload) or workload.has_sessions:
        if config.parallel_sampling == "auto":
            return workload
        raise ValueError("--parallel-sampling fan-out with sessions or a closed loop is not modelled (which "
                         "child's output would the next turn carry?): use fork")
    return fan_out(workload)


def fans_out(config, workload) -> bool:
    """Whether a run of ``config`` hands the scheduler a request sampled ``n > 1`` times (no beam) as ``n`` requests
    (`as_run`: already fanned out, or fanned out there), what `sim.kernel.async_outputs` checks against vLLM's
    ``AsyncScheduler``; False: such a request runs as one group (``fork``)."""
    if getattr(workload, "fan_parent", None) is not None:
        return True
    return (config.parallel_sampling != "fork" and config.allocator == "paged" and not releases_arrivals(workload)
            and not workload.has_sessions)


def fan_out(workload):
    """``workload`` with each row sampled ``n > 1`` times (no beam) replaced by ``n`` rows sampled once, in its
    place; ``fan_parent`` gives every row the row it came from."""
    sampled, n = _sampled(workload), np.asarray(workload.n)
    rows = np.repeat(np.arange(len(workload), dtype=np.int64), np.where(sampled, n, 1))
    return workload.select(rows, n=np.where(sampled[rows], 1, n[rows]), fan_parent=rows)


def sampling_mode(workload) -> str | None:
    """How the run's requests sampled more than once without a beam ran, for the summary: ``fan-out`` (the
    workload was fanned out), ``fork``, or None (no such request)."""
    if getattr(workload, "fan_parent", None) is not None:
        return "fan-out"
    return "fork" if _sampled(workload).any() else None


def _sampled(workload) -> np.ndarray:
    """Which rows are sampled more than once without a beam."""
    return (np.asarray(workload.n) > 1) & (np.asarray(workload.beam_width) <= 1)


def first_children(fan_parent: np.ndarray) -> np.ndarray:
    """The first row of each request in a fanned-out workload (``fan_parent`` is sorted: a request's children
    are one run of rows)."""
    return np.flatnonzero(np.r_[True, fan_parent[1:] != fan_parent[:-1]])


def aggregate(columns: dict[str, np.ndarray], fan_parent: np.ndarray) -> dict[str, np.ndarray]:
    """The requests table's columns (per row of a fanned-out workload) per request again: ``fan_parent`` is
    sorted, so each request's children are one run of rows. Its id, trace row, session, turn, system prompt,
    arrival, lengths and beam width: the first child's. Times: the earliest admission and first token, the last finish
    (none while a child has none), the children's mean time per output token (``tpot_s``: vLLM times each
    child request on its own; the first token to the last finish would span the children); counts summed
    (``n`` too: each child is one sample, so the request's ``n`` comes back); rejected if any child was, with
    its reason."""
    starts = first_children(fan_parent)
    children = np.diff(np.append(starts, len(fan_parent)))
    out = {name: columns[name][starts]
           for name in ("request_id", "trace_row", "session_id", "turn", "prefix_group", "prefix_len",
                        "arrival_s", "prompt_tokens", "output_tokens", "length_capped_tokens", "beam_width")}
    for name in ("admitted_s", "first_token_s"):
        out[name] = np.fmin.reduceat(columns[name], starts)
    out["finished_s"] = np.maximum.reduceat(columns["finished_s"], starts)  # NaN if any child has none
    out["tpot_s"] = np.add.reduceat(columns["tpot_s"], starts) / children  # NaN if any child has none
    for name in ("num_seqs", "n", "cached_tokens", "host_tokens", "preemptions"):
        out[name] = np.add.reduceat(columns[name], starts)
    rejected = columns["rejected"]
    out["rejected"] = np.logical_or.reduceat(rejected, starts)
    reasons = np.full(len(starts), "", dtype=object)
    for i in np.flatnonzero(rejected)[::-1]:  # the first rejected child's reason
        reasons[np.searchsorted(starts, i, side="right") - 1] = columns["reject_reason"][i]
    out["reject_reason"] = reasons
    return out
