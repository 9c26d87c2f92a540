"""vLLM 0.33's DP coordinator on the simulated clock: the engines' load counts that ``dp-lb`` reads, as published.

Why: vLLM's data-parallel load balancer (`sim.kernel.routers.DataParallelLB`) does not read the engines as they
are. Each engine sends its counts to the DP coordinator, the coordinator publishes them to every API server at most
every 100 ms, and between publishes each API server bumps its own copy. Where this lags, a burst within one window
is spread by the client's in-flight count and those bumps alone, and a request sees an engine's queue up to 100 ms late; this module reproduces that
sequence of snapshots deterministically, from the same events vLLM's processes exchange.

What each side does in vLLM 0.33 (``vllm/v1/engine``):

* an engine (``core.py``, ``EngineCoreProc.run_busy_loop`` and ``DPEngineCoreProc.run_busy_loop``) calls
  ``_maybe_publish_request_counts`` twice per loop: after ``_process_input_queue`` (the requests received since
  the last step added to its waiting queue: the pre-step report) and after ``_process_engine_step`` (the step's
  results applied: the post-step report). It sends ``(waiting, running, kv_cache_usage)`` only when
  ``scheduler.get_request_counts()`` (``len(running)``, ``len(waiting) + len(kv_holding_waiting)``) differs from
  the last counts it sent: the usage rides along with a count change and is not sent on its own. A lock-step
  (MoE) rank stamps each report with its ``step_counter`` and ``current_wave`` (the same for both reports of one
  loop; kvsim's global step index orders them alike);
* the coordinator (``coordinator.py``, ``DPCoordinatorProc.process_input_socket``) keeps every engine's last
  report and loops on ``poller.poll(timeout=max(min_timeout, wait_for - elapsed))`` with ``elapsed`` the time
  since its last publish and ``wait_for`` 100 ms (``min_stats_update_interval_ms``) once a report came since the
  last publish (``stats_changed``), 5 s otherwise; when a poll times out with no message it publishes. So a
  report after a quiet 100 ms is published at once, and reports within 100 ms of a publish wait for the end of
  those 100 ms. With wave coordination (``enable_wave_coordination = model_config.is_moe``, ``v1/engine/
  utils.py``), the first report stamped with a later step copies every engine's counts as they stood before it
  (``last_step_counts``: the ranks' state at that step boundary) if anything changed, and the next publish sends
  that copy (leaving ``stats_changed`` set); until such a copy exists every poll waits at least 50 ms
  (``min_timeout``), and a timeout with no copy publishes the counts as they are;
* each API server (``core_client.py``, ``DPAsyncMPClient._ensure_stats_update_task``) replaces its ``lb_engines``
  with each publish's counts (the coordinator sends every publish on one XPUB socket all of them subscribe to);
  ``DPLBAsyncMPClient.get_core_engine_for_request`` reads them and adds ``client_count`` (the number of API
  servers, `sim.kernel.api_servers`) to the chosen engine's waiting count (``current_counts[eng_index][0] +=
  self.client_count``) in that server's copy only, which the next publish overwrites.

kvsim's mapping (`sim.kernel.fleet.Fleet._rows`, `sim.kernel.lockstep`): a replica's scheduler applies a step's
results when it plans it, so at the top of its loop at ``t`` (a step's end) it holds the post-step state of the
step that just ended: that is reported, then the arrivals due at ``t`` are delivered and the pre-step state is
reported, then the next step is planned. So what a publish holds for a busy engine is its last pre-step report:
the state after its last finished step plus the requests it took in then, before the running step's schedule
(a request admitted by that step still counts as waiting); for an idle one, the state after its last step. A
lock-step boundary's copy holds every rank's post-step report (all of them are sent before any rank's next
report, where vLLM's ranks race). A decode run the fast-forward takes in one row changes no count (it ends
after a step that finishes a request, and nothing is delivered inside it), so vLLM's engine would send nothing
inside it either. Messages and publishes take no time; the coordinator's millisecond clock is taken as exact; a
publish falling due at the instant of a report goes after it (the poll returns the waiting message), one due at
an arrival's instant before the routing. The run's start finds the coordinator idle for at least 100 ms since
its last publish (a server waiting for its first request), so the first report is published at once.
"""

from __future__ import annotations

from sim.kernel.arrivals import ARRIVAL_TIE_S

MIN_STATS_UPDATE_INTERVAL_S = 0.1
"""``DPCoordinatorProc.run_coordinator``'s ``min_stats_update_interval_ms: int = 100`` (vLLM 0.33,
``v1/engine/coordinator.py`` line 170), which ``launch_core_engines`` (``v1/engine/utils.py`` line 1266) does not
pass: no engine argument sets it, so neither does kvsim."""

IDLE_PUBLISH_INTERVAL_S = 5.0
"""The coordinator's publish interval while no report came (``wait_for = ... else 5000``, ``coordinator.py`` line
267)."""

STEP_STATS_WAIT_S = 0.05
"""With wave coordination, the least poll timeout until a step boundary's counts are copied (``min_timeout =
50``, ``coordinator.py`` line 273: "Wait at least 50ms to ensure we've received all stats for the current
step")."""

Counts = list  # [waiting, running, kv_cache_usage], as vLLM's EngineState.request_counts


class DPCoordinator:
    """The coordinator's published counts as each of ``clients`` API servers holds them (``lb_engines``), and what
    feeds them."""

    def __init__(self, engines: int, start_s: float, *, wave_coordination: bool = False, clients: int = 1) -> None:
        self.wave_coordination = wave_coordination
        self.engines = engines
        self.counts: list[Counts] = [[0, 0, 0.0] for _ in range(engines)]  # each engine's last report
        self.sent: list[tuple[int, int]] = [(0, 0)] * engines  # each engine's ``last_counts`` (running, waiting)
        # each API server's copy (``lb_engines``), a client's bumps in its own only
        self.copies: list[list[Counts]] = [[[0, 0, 0.0] for _ in range(engines)] for _ in range(clients)]
        self.stats_changed = False
        self.last_step_counts: list[Counts] | None = None
        self.last_stats_step = -1
        self.now = start_s
        self.last_publish = start_s - MIN_STATS_UPDATE_INTERVAL_S
        self.publishes = 0
        self.deadline = self._deadline()

    # -- the API server's side ---------------------------------------------------------------------------
    def view(self, t: float, client: int = 0) -> list[Counts]:
        """API server ``client``'s ``lb_engines`` at ``t``, every publish due by then applied; its router bumps
        it in place."""
        self._advance(t, inclusive=True)
        return self.copies[client]

    @property
    def lb_engines(self) -> list[Counts]:
        """The first API server's copy (the only one with one server)."""
        return self.copies[0]

    # -- an engine's side ---------------------------------------------------------------------------------
    def report(self, t: float, engine: int, waiting: int, running: int, kv_cache_usage: float,
               step: int = 0) -> None:
        """Engine ``engine``'s ``_maybe_publish_request_counts`` at ``t``: a message only when its counts
        changed; ``step``: the lock-step rank's stamp (monotone over waves)."""
        if self.sent[engine] == (running, waiting):
            return
        self.sent[engine] = (running, waiting)
        self._advance(t, inclusive=False)
        if self.wave_coordination and step > self.last_stats_step:
            if self.stats_changed:
                self.last_step_counts = [list(c) for c in self.counts]
            self.last_stats_step = step
        self.counts[engine] = [waiting, running, kv_cache_usage]
        self.stats_changed = True
        self.deadline = self._deadline()

    # -- the coordinator's loop ---------------------------------------------------------------------------
    def _deadline(self) -> float:
        """When the poll entered at ``now`` times out if no message comes."""
        wait_for = MIN_STATS_UPDATE_INTERVAL_S if self.stats_changed else IDLE_PUBLISH_INTERVAL_S
        min_timeout = STEP_STATS_WAIT_S if self.wave_coordination and self.last_step_counts is None else 0.0
        return max(self.now + min_timeout, self.last_publish + wait_for)  # poll(max(min, wait_for - elapsed))

    def _advance(self, t: float, *, inclusive: bool) -> None:
        """Publish at every poll timeout before ``t`` (at ``t`` too if ``inclusive``). Instants within
        ``ARRIVAL_TIE_S`` are one: replicas' step ends are sums of step times that the decode fast-forward and
        step by step round differently, so two engines reporting at one instant may be an ulp apart either
        way, and a deadline on that instant must fall on the same side of both in either mode."""
        while self.deadline < t - ARRIVAL_TIE_S or (inclusive and self.deadline <= t + ARRIVAL_TIE_S):
            self.now = self.deadline
            if self.last_step_counts is not None:
                published, self.last_step_counts = self.last_step_counts, None
            else:
                published, self.stats_changed = self.counts, False
            self.copies = [[list(c) for c in published] for _ in self.copies]
            self.publishes += 1
            self.last_publish = self.now
            self.deadline = self._deadline()
        self.now = max(self.now, t)
