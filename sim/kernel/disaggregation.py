"""Disaggregated prefill/decode serving (``--prefill-replicas N --decode-replicas M``): vLLM's NixlConnector
behind a P/D proxy, as llm-d and NVIDIA Dynamo deploy it, in one discrete-event simulation.

What is modelled, and where it comes from (vLLM 0.33's source; the proxy is not in vLLM's wheel: it is
``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`` in vLLM's repository, whose behaviour its docs
describe and kvsim assumes):

* The proxy sends each request to a prefill replica with ``max_tokens=1`` and ``kv_transfer_params``
  ``do_remote_decode``, round-robin over the prefill replicas. The prefill replica schedules it as any request:
  it computes the prompt, samples one token and finishes. Its connector's ``request_finished`` returns
  ``delay_free_blocks``: the request's blocks stay held (not freed, not evictable) until the decode side has
  read them. vLLM's engine keeps stepping while such requests remain (``Scheduler.has_finished_requests``), so
  they are freed as the read completes: kvsim frees them at the transfer's end. The hold is a lease
  (``kv_lease_duration``, 30 s, ``nixl/base_scheduler.py``) that the decode side renews from the moment it
  receives the request until its pull completes (``on_new_request`` starts a heartbeat, sent at most every
  lease // 6 = 5 s, each extending the lease by 2/3 of it, ``base_worker._handle_heartbeat``;
  ``update_connector_output`` stops it). The proxy forwards the request as the prefill ends, so a live decode
  replica always renews in time and the lease lapses only when a decode replica stops stepping, which kvsim
  does not model: kvsim never expires it.
* When the prefill response returns (the prefill step's end), the proxy sends the original request, with the
  prefill's ``kv_transfer_params`` (``do_remote_prefill``), to a decode replica, round-robin. The decode
  replica's scheduler admits it as it admits any request (FCFS, head of line, its whole prompt must fit under
  ``scheduler_reserve_full_isl``), giving it blocks for its whole prompt; ``get_num_new_matched_tokens`` says
  the tokens beyond its local prefix-cache hit are loaded asynchronously, and the request waits in
  ``WAITING_FOR_REMOTE_KVS`` while the worker pulls them (`sim.kernel.admission.GroupMechanics._start_pulling`).
  Once they are in, ``_update_waiting_for_remote_kv`` caches the blocks and sets ``num_computed_tokens`` to the
  prompt less one token, which the next step recomputes to sample the first output token. A dense model has no
  ``_prefill_backoff``: the prefill side computes and sends the whole prompt.
* A pull moves the prompt's blocks not cached locally, each GPU of the decode replica its own shard of the KV
  (``kv_bytes_per_token_per_gpu``) over its own NIC: ``--kv-transfer-latency-s`` + bytes /
  ``--kv-transfer-gb-s``. Pulls into one decode replica run one after another, in the order they start
  (`sim.kernel.host_loads.HostLoads`, as host loads do), each at the link's full bandwidth.
* TTFT is the first token the decode side produces: the first token the user receives in vLLM's P/D (the
  proxy streams the decode replica's response; the prefill's sampled token is discarded). TPOT is the decode
  side's. ``admitted_s`` is the prefill admission; the requests table adds ``prefill_replica``,
  ``decode_replica``, ``prefill_finished_s``, ``decode_arrival_s``, ``transfer_start_s``, ``transfer_end_s`` and
  ``transfer_bytes``.

Not modelled, refused (`SimConfig._check_disaggregation`): async scheduling, speculative decoding, a host tier, sessions and
closed loops, n > 1 and beams, a router other than the proxy's round-robin, any allocator other than ``paged``
with chunked prefill and continuous batching (the connector needs vLLM's paged KV cache manager), and a model on
vLLM's hybrid KV cache manager (sliding-window layers, whose pulls the connector clips).
What kvsim leaves out of the clock: the proxy's and HTTP's own latency, the NIXL handshake, and contention
between pulls into different decode replicas from one prefill replica (each decode replica's link is its own).
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from functools import partial

import numpy as np

from sim.kernel.arrivals import ARRIVAL_TIE_S, ArrivalSource
from sim.kernel.config import SimConfig
from sim.kernel.engine import transfer_time_of
from sim.kernel.fleet import Fleet
from sim.kernel.fleet_replica import Replica
from sim.kernel.host_loads import HostLoads
from sim.kernel.kv_transfer import parse_kv_transfer_config
from sim.kernel.parallel_sampling import as_run
from sim.kernel.replica import SimResult, hybrid_kv_groups, summary_extra


def check_pd_workload(workload) -> None:
    """Refuse a workload a P/D fleet does not model: closed loops and sessions (a turn released by a previous
    turn's finish), and requests sampled n > 1 times or with beams (fanned out or forked)."""
    if getattr(workload, "closed_loop", None) is not None or getattr(workload, "has_sessions", False):
        raise ValueError("a P/D fleet does not model closed loops or sessions (turns released by a previous "
                         "turn's finish); give an open-loop workload")
    if (np.asarray(workload.n) > 1).any() or (np.asarray(workload.beam_width) > 1).any():
        raise ValueError("a P/D fleet does not model requests with n > 1 or beam search")


def transfer_seconds(config: SimConfig, model, block_size: int, blocks: int) -> float:
    """One pull of ``blocks`` blocks: the latency plus each GPU's shard of their KV over its own link."""
    shard = blocks * block_size * model.kv_bytes_per_token_per_gpu(config.tensor_parallel)
    return config.kv_transfer_latency_s + shard / (config.kv_transfer_gb_s * 1e9)


def _row_of_its_own(replica: Replica) -> bool:
    """Whether ``replica``'s last plan, though it left nothing running, ended a row of its own
    (`engine.empty_step`): it preempted (or moved) something, so the replica plans again at the row's end
    whatever blocks it holds for pulls, and may admit its queue then into the blocks the preemption freed."""
    plan = replica.sched.plan
    return plan is not None and bool(plan.preempted or transfer_time_of(replica.cost, plan))


def _ties_by_index(due: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """``due`` (time, index) pairs in time order, those within `ARRIVAL_TIE_S` of each other as one instant, in
    index order: two prefill replicas finishing at one step end an ulp apart (the fast-forward and step by step
    round their sums of step times differently) reach the proxy's round-robin in the same order either way."""
    ordered, k = [], 0
    while k < len(due):
        end = k
        while end + 1 < len(due) and due[end + 1][0] - due[k][0] <= ARRIVAL_TIE_S:
            end += 1
        ordered += sorted(due[k:end + 1], key=lambda entry: entry[1])
        k = end + 1
    return ordered


class PullLoads(HostLoads):
    """A decode replica's pulls (`HostLoads`, priced by `transfer_seconds`), telling the fleet when each starts
    and ends, so that the prefill side frees the blocks read."""

    __slots__ = ("on_start",)

    def __init__(self, seconds_of, on_start) -> None:
        super().__init__(seconds_of)
        self.on_start = on_start

    def start(self, group, hashes, now: float, blocks: int | None = None) -> None:
        super().start(group, hashes, now, blocks)
        self.on_start(group, now, self.free_at, blocks)


class PDFleet(Fleet):
    """Prefill replicas 0..P-1 and decode replicas P..P+D-1 in one SimPy environment, every replica in step with
    the fleet's clock (a decode arrival is known only when a prefill step that finishes a request is planned)."""

    def __init__(self, config: SimConfig, workload, *, progress=None) -> None:
        p, d = config.prefill_replicas, config.decode_replicas
        self.num_prefill = p
        prefill_load = dataclasses.replace(workload, output_tokens=np.ones(len(workload), np.int64),
                                           max_tokens=np.ones(len(workload), np.int64))
        # the base fleet's replicas are all of them, each built as a plain replica of ``config``
        plain = dataclasses.replace(config, replicas=p + d, prefill_replicas=0, decode_replicas=0,
                                    kv_transfer_config=None)
        super().__init__(plain, prefill_load, progress=progress)
        self.config, self.workload, self.user_progress = config, workload, progress
        self.observed = self.coupled = True
        self.decode_source = ArrivalSource.for_memory(workload, self.replicas[-1].memory, start_s=self.start)
        n = self.size
        self.decode_of = np.full(n, -1, np.int64)
        self.prefill_finished = np.full(n, np.nan)
        self.prefill_admitted = np.full(n, np.nan)
        self.prefill_preemptions = np.zeros(n, np.int64)
        self.decode_arrival = np.full(n, np.nan)
        self.transfer_start = np.full(n, np.nan)
        self.transfer_end = np.full(n, np.nan)
        self.transfer_bytes = np.zeros(n, np.int64)
        self.phase = np.zeros(n, np.int8)  # 0: prefill, 1: decode
        # ``routed`` (the base fleet's count, which lets idle replicas stop once it reaches every request) counts
        # the requests decided: rejected on the prefill side or sent to a decode replica
        self.arrived = 0  # arrivals routed to prefill replicas
        self.next_decode = 0  # the proxy's round-robin over the decode replicas
        self.pending: list[tuple[float, int]] = []  # decode requests (arrival, index) not yet routed
        self.releases: list[tuple[float, int]] = []  # (transfer end, index): prefill blocks to free then
        self.release_s: dict[int, float] = {}  # index -> when its prefill blocks are freed, once that is known
        self.held: dict[int, tuple[Replica, object, dict]] = {}  # index -> its prefill replica, group, lags
        self.held_blocks: dict[int, int] = {}
        self.held_block_s = 0.0  # prefill-side blocks held for transfer, integrated over time
        self.freed_s = np.full(p, -np.inf)  # each prefill replica's latest blocks freed after a pull
        model, size = self.cap.model, self.replicas[0].memory.block_size
        self.bytes_per_block = size * model.kv_bytes_per_token_per_gpu(config.tensor_parallel) * config.tensor_parallel
        for r in self.replicas[:p]:
            r.sched.groups.delay_free = partial(self._hold, r)
            r.sched.groups.frees_at = partial(self._frees_at, r)
        for r in self.replicas[p:]:
            r.sched.loads = PullLoads(partial(transfer_seconds, config, model, size), self._pull_started)

    # -- the run ------------------------------------------------------------------------------------------
    def run(self) -> float:
        if not self.size:
            return self.start
        self.env.process(self._arrivals())
        return self.simulate(self.replicas)

    def _engine(self, replica: Replica):
        """The base fleet's replica loop; only decode replicas tell ``progress`` of requests done (a request
        leaves its prefill replica and then its decode replica)."""
        self.progress = self.user_progress if replica.number >= self.num_prefill else None
        yield from super()._engine(replica)

    def _arrivals(self):
        """Route each arrival to a prefill replica at its time."""
        env = self.env
        while self.arrived < self.size:
            t = self.source.next_time()
            if t > env.now:
                yield env.timeout(t - env.now)
            self._route_due(env.now)

    def _route(self, t: float, i: int) -> None:
        """The proxy's prefill request: round-robin over the prefill replicas."""
        chosen = self.arrived % self.num_prefill
        self.arrived += 1
        self.replica_of[i] = chosen
        self._send(self.replicas[chosen], i, self.source.make_group(i, t), t)

    def _send(self, replica: Replica, i: int, group, t: float) -> None:
        """Put ``group`` in ``replica``'s inbox (rejected there at once if it can never run), waking it."""
        if (reason := replica.sched.groups.never_runs(group)) is not None:
            replica.sched.groups.reject(group, reason, t)
            replica.delivered += 1
            self.rejected_until = max(self.rejected_until, t)
            return
        replica.inbox.append(i)
        replica.groups[i] = group
        self._wake(replica)

    def _wake(self, replica: Replica) -> None:
        if replica.wake is not None and not replica.wake.triggered:
            replica.wake.succeed()
            replica.busy_until = self.env.now

    def _route_due(self, now: float) -> None:
        """Arrivals due by ``now`` to prefill replicas, decode requests due by ``now`` to decode replicas, and
        the prefill blocks whose pulls ended by ``now`` freed."""
        super()._route_due(now)
        while self.releases and self.releases[0][0] <= now:
            self._release(heapq.heappop(self.releases)[1])
        due = []
        while self.pending and self.pending[0][0] <= now:
            due.append(heapq.heappop(self.pending))
        for t, i in _ties_by_index(due):
            chosen = self.num_prefill + self.next_decode % (len(self.replicas) - self.num_prefill)
            self.next_decode += 1
            self.decode_of[i] = chosen
            self._decided()
            replica = self.replicas[chosen]
            replica.sched.groups.remote.add(i)
            self._send(replica, i, self.decode_source.make_group(i, t), t)

    def _decided(self) -> None:
        """One more request is rejected on the prefill side or sent to decode: after the last, nothing more
        comes to any replica, and the idle ones stop."""
        self.routed += 1
        if self.routed == self.size:
            for replica in self.replicas:
                self._wake(replica)

    def _at(self, t: float):
        """Route what is due at ``t`` then (a replica idle till then sleeps through it)."""
        yield self.env.timeout(t - self.env.now)
        self._route_due(self.env.now)

    def _deliver(self, replica: Replica, now: float) -> None:
        times = self.decode_arrival if replica.number >= self.num_prefill else self.source.arrival_s
        inbox, sched = replica.inbox, replica.sched
        while inbox and times[inbox[0]] <= now:
            i = inbox.popleft()
            replica.delivered += 1
            sched.add(replica.groups.pop(i), float(times[i]))

    def _next_time(self, replica: Replica) -> float | None:
        """The next request that could reach ``replica``: an arrival for a prefill replica; for a decode replica
        the next decode request known, or the earliest a prefill replica could finish one it does not know yet.
        A prefill finish is known once its step is planned: for a prefill replica with requests running (or just
        sent), or whose last plan preempted everything it ran (it plans again, and may admit its queue into the
        blocks freed, when that row ends: `engine.empty_step`), not before its row in flight ends; for one whose
        queue waits for the blocks it holds for pulls,
        not before some of them could be freed (`_frees_at`), leaving out the pulls this replica would start
        (at its next plan, no sooner than this bound: counting them, the two would wait for each other a moment
        at a time); one with neither finishes none before its next arrival."""
        if replica.number < self.num_prefill:
            return self.source.next_time()
        times = [self.pending[0][0]] if self.pending else []
        times += [self.decode_arrival[replica.inbox[0]]] if replica.inbox else []
        for r in self.replicas[:self.num_prefill]:
            if r.sched.running or r.inbox or _row_of_its_own(r) or self._woken_by_a_release(r):
                times.append(r.busy_until)
            elif r.sched.waiting:
                times += self._held_free_times(r, replica)
        if (arrival := self.source.next_time()) is not None:  # an idle prefill replica starts no sooner
            times.append(arrival)
        times = [t for t in times if t < np.inf]
        return self._after(min(times), self.env.now) if times else None

    def _woken_by_a_release(self, r: Replica) -> bool:
        """Whether prefill replica ``r`` plans at this instant (its wait ended, SimPy has not resumed it yet) with
        blocks freed since it slept: a pull it waited for ended, so it may admit its queue now, though the blocks
        are no longer listed as held (`_held_free_times`). It sleeps no later than any of its pulls' ends
        (`_frees_at`), so a release at or after its wake's moment is one it has not seen."""
        now = self.env.now + ARRIVAL_TIE_S
        return r.busy_until <= now and self.freed_s[r.number] >= r.busy_until - ARRIVAL_TIE_S

    @staticmethod
    def _after(t: float, now: float) -> float:
        """``t``, or where it is not after ``now`` (another replica plans at ``now``, not yet run by SimPy), a
        moment later, by when it has: a replica waiting for it must yield to SimPy, else it plans again at
        ``now``, forever, before that replica can move."""
        return t if t > now + ARRIVAL_TIE_S else now + 2 * ARRIVAL_TIE_S

    # -- the connector ------------------------------------------------------------------------------------
    def _hold(self, replica: Replica, group, lags: dict) -> None:
        """A prefill request finished: its blocks stay held until the decode side has read them."""
        self.held[group.index] = (replica, group, lags)
        self.held_blocks[group.index] = replica.memory.held_blocks(group.seq_ids[0])

    def _frees_at(self, replica: Replica, now: float) -> float | None:
        """The first time after ``now`` that blocks ``replica`` holds for pulls could be freed (None: it holds
        none; `_held_free_times`). Where that is not after ``now`` (a decode replica plans at ``now`` too, not
        yet run by SimPy), a moment later, by when it has (`_after`)."""
        times = self._held_free_times(replica)
        if not times:
            return None
        soonest = min(times)
        return self._after(soonest, now) if soonest < np.inf else now + 2 * ARRIVAL_TIE_S

    def _held_free_times(self, replica: Replica, but: Replica | None = None) -> list[float]:
        """For each request whose blocks prefill ``replica`` holds, the first time they could be freed: its pull's
        end, once it started, or the moment the decode side rejected it (`_release_at`: freed then, though SimPy
        may not have run that yet); else when the proxy sends it to a decode replica, or when that replica next plans
        (its row in flight ends), where it may admit it and start the pull, or reject it. ``but``: a decode
        replica whose next plan is not counted (the caller's own, `_next_time`)."""
        times = []
        for i, held in self.held.items():
            if held[0] is not replica:
                continue
            if i in self.release_s:  # its pull started, or the decode side rejected it
                times.append(self.release_s[i])
            elif self.decode_of[i] < 0:
                times.append(float(self.decode_arrival[i]))
            elif self.replicas[self.decode_of[i]] is not but:
                times.append(self.replicas[self.decode_of[i]].busy_until)
        return times

    def _on_done(self, t: float, index: int) -> None:
        """A request left a replica at ``t``: from a prefill replica, the proxy sends it on to decode at ``t``
        (or it was rejected there); from a decode replica, it is done."""
        if self.phase[index] == 1:
            if self.rec.rejected[index] and index in self.held and np.isnan(self.transfer_end[index]):
                self._release_at(index, t)  # rejected before its pull: the decode side tells the prefill to free
            return
        rec = self.rec
        self.prefill_admitted[index] = rec.admitted_s[index]
        self.prefill_preemptions[index] = rec.preemptions[index]
        if rec.rejected[index]:
            self._decided()
            return
        self.phase[index] = 1
        self.prefill_finished[index] = t
        self.decode_arrival[index] = t
        self.held_block_s -= self.held_blocks[index] * t  # + blocks * the transfer's end, when it is known
        heapq.heappush(self.pending, (t, index))
        self.env.process(self._at(t))

    def _pull_started(self, group, now: float, end: float, blocks: int | None) -> None:
        """A decode replica started pulling ``group``'s prompt at ``now``; it lands at ``end``."""
        i = group.index
        self.transfer_start[i], self.transfer_end[i] = now, end
        self.transfer_bytes[i] = (blocks or 0) * self.bytes_per_block
        self._release_at(i, end)

    def _release_at(self, i: int, t: float) -> None:
        """Free request ``i``'s prefill blocks at ``t``."""
        self.held_block_s += self.held_blocks[i] * t
        self.release_s[i] = t
        heapq.heappush(self.releases, (t, i))
        self.env.process(self._at(t))

    def _release(self, i: int) -> None:
        replica, group, lags = self.held.pop(i)
        del self.release_s[i]
        replica.memory.free_group(group, lags, True)
        self.freed_s[replica.number] = self.env.now


def run_pd_fleet(config: SimConfig, workload, *, progress=None) -> SimResult:
    """Simulate ``workload`` on a P/D fleet (`PDFleet`)."""
    from sim.kernel.fleet_summary import fleet_result

    check_pd_workload(workload)
    wall_start = time.perf_counter()
    workload = as_run(config, workload)  # outputs cut at max_model_len, as vLLM stops them
    fleet = PDFleet(config, workload, progress=progress)
    if hybrid_kv_groups(config, fleet.model):
        raise ValueError(f"a P/D fleet does not model vLLM's hybrid KV cache manager (sliding-window layers, whose "
                         f"pulls the connector clips), got {fleet.model.name}; --disable-hybrid-kv-cache-manager "
                         "treats them as full attention")
    end = fleet.run()
    if fleet.held:
        raise RuntimeError(f"{len(fleet.held)} prefill requests still hold blocks at the end of the run")
    if config.debug_invariants:
        for replica in fleet.replicas:
            replica.memory.check_invariants()
    rec = fleet.rec
    rec.admitted_s[:] = np.where(np.isnan(fleet.prefill_admitted), rec.admitted_s, fleet.prefill_admitted)
    rec.preemptions += np.where(fleet.phase == 1, fleet.prefill_preemptions, 0)
    # rejected on the decode side: the user gets no token (the prefill's sampled one is the proxy's, discarded),
    # so the times its prefill finish recorded are not a first token and a finish
    refused = (fleet.phase == 1) & rec.rejected
    rec.first_token_s[refused] = rec.finished_s[refused] = np.nan
    extra = summary_extra(config, workload, fleet.cap, fleet.replicas[0].cost, fleet.replicas[0].memory)
    extra["memory_snapshots"] = fleet.num_snapshots
    result = fleet_result(fleet, workload, end, extra, served_by=fleet.decode_of)
    add_columns(result, fleet)
    result.summary["disaggregation"] = disaggregation_summary(fleet, end, result.summary["per_replica"])
    result.summary["load_imbalance"] = max(result.summary["disaggregation"]["prefill_load_imbalance"],
                                           result.summary["disaggregation"]["decode_load_imbalance"])
    result.summary["wall_time_s"] = time.perf_counter() - wall_start
    return result


def add_columns(result: SimResult, fleet: PDFleet) -> None:
    """The P/D columns of the requests table, after ``replica`` (the prefill replica, renamed)."""
    requests = result.requests = result.requests.rename(columns={"replica": "prefill_replica"})
    at = requests.columns.get_loc("prefill_replica") + 1
    for offset, (name, values) in enumerate((
            ("decode_replica", fleet.decode_of), ("prefill_finished_s", fleet.prefill_finished),
            ("decode_arrival_s", fleet.decode_arrival), ("transfer_start_s", fleet.transfer_start),
            ("transfer_end_s", fleet.transfer_end), ("transfer_bytes", fleet.transfer_bytes))):
        requests.insert(at + offset, name, values)


def disaggregation_summary(fleet: PDFleet, end: float, per_replica: list[dict]) -> dict:
    """The summary's ``disaggregation`` block: the replicas of each role, the link, the pulls' totals, the
    prefill side's blocks held for them (a time-weighted mean over the run, all prefill replicas together), and
    each role's ``load_imbalance`` (`fleet_summary.load_imbalance` over its replicas, ``per_replica`` the fleet
    summary's: a prefill replica computes prompts, a decode replica decodes, so the two are not compared; the
    fleet's ``load_imbalance`` is the larger)."""
    from sim.kernel.fleet_summary import load_imbalance

    config = fleet.config
    processed = [r["processed_tokens"] for r in per_replica]
    pulled = ~np.isnan(fleet.transfer_end)
    seconds = fleet.transfer_end[pulled] - fleet.transfer_start[pulled]
    span = end - fleet.start
    wait = fleet.transfer_start[pulled] - fleet.decode_arrival[pulled]
    return {
        "prefill_replicas": fleet.num_prefill, "decode_replicas": len(fleet.replicas) - fleet.num_prefill,
        "kv_connector": parse_kv_transfer_config(config.kv_transfer_config)["kv_connector"],
        "kv_transfer_gb_s": config.kv_transfer_gb_s, "kv_transfer_latency_s": config.kv_transfer_latency_s,
        "transfers": int(pulled.sum()), "transfer_bytes": int(fleet.transfer_bytes.sum()),
        "transfer_seconds": float(seconds.sum()),
        "transfer_p50_s": float(np.median(seconds)) if len(seconds) else None,
        "decode_admission_wait_p50_s": float(np.median(wait)) if len(wait) else None,
        "prefill_blocks_held_for_transfer_mean": fleet.held_block_s / span if span > 0 else 0.0,
        "prefill_load_imbalance": load_imbalance(processed[:fleet.num_prefill]),
        "decode_load_imbalance": load_imbalance(processed[fleet.num_prefill:]),
    }
