"""The KV guard as a run applies it before each stage: the server's capacity, the request mix, and
in open-loop mode the request duration that turns a rate into requests in flight.

``loadgen.run.kv_guard`` decides from numbers (pure); this module gathers the numbers for one run:

- closed loop: in flight = the stage's concurrency C; ``guard.decide(C, capacity, mix)``.
- open loop (Little's law, L = lambda x W): in flight = rate x W, where W is the E2E mean of a few
  sequential requests before the first stage (the duration sample, ``rate.probe_requests`` of them;
  ``sample_duration_s``), then of the last
  finished stage, never below a lower rate's (latency grows with the rate); ``guard.decide_rate``.

The session owns one ``StageGuard``; the sweep plan calls ``decide`` before each stage.
"""

from __future__ import annotations

from collections.abc import Callable

from loadgen.run.kv_guard import decide, decide_rate, decide_spread
from loadgen.run.prompt_source import prompt_source
from loadgen.wire.exchange import stream_ask
from loadgen.workload.mix import scenario_mix

DURATION_SAMPLE_SEED = 0xB0B  # the duration sample's prompts are its own (not any user's)


def sample_duration_s(rt, n: int) -> tuple[float | None, list]:
    """E2E mean of ``n`` sequential requests of the scenario (None if none succeeded): the KV
    guard's request duration W for the first rate stage, measured before any load; and the
    requests' results (real requests: the session counts them in the run's totals)."""
    sc = rt.scenario
    client = rt.stream_client(rt.environment.host)
    try:
        model = rt.model(client)
        asks = prompt_source(rt, client, model, (sc.prompt.seed, DURATION_SAMPLE_SEED))
        results = [stream_ask(client, sc, model, rt.compat, asks.next()).result for _ in range(n)]
        e2e = [r.e2e_s for r in results if r.ok]
        return (sum(e2e) / len(e2e) if e2e else None), results
    finally:
        client.close()


class StageGuard:
    """Capacity and request duration of one run, and the guard's decision for a stage's load."""

    def __init__(self, rt, fleet, say: Callable[[str], None]):
        self.rt, self.fleet, self.say = rt, fleet, say
        self.capacity = None  # loadgen.server.replies.Capacity, from the start check (the fleet's: the sum)
        # hosts spread by the client, every capacity known: ((replica name, KV tokens), ...) for the share check
        self.spread: tuple[tuple[str, int], ...] = ()
        # open loop: W of Little's law, from the duration sample, then the last finished stage's E2E mean
        self.expected_duration_s: float | None = None

    def sample_duration(self, unstaged) -> None:
        """Open loop with a known capacity: time ``rate.probe_requests`` sequential requests, so
        the first stage's guard has a request duration. The requests are counted in ``unstaged``
        (``loadgen.run.unstaged.UnstagedRequests``). A failed sample leaves the first stage
        unguarded, said."""
        sc = self.rt.scenario
        if not (sc.open_loop and self.capacity is not None and self.capacity.tokens and sc.rate.probe_requests):
            return
        try:
            self.expected_duration_s, results = sample_duration_s(self.rt, sc.rate.probe_requests)
        except Exception as exc:  # the first stage runs unguarded, and says so
            self.say(f"llm-loadgen: warning: the KV guard's duration sample failed ({self.rt.redact(str(exc))[:200]}); "
                     "the first rate stage runs unguarded")
            return
        unstaged.count(tuple((r, True) for r in results), sc.output_tokens)
        if self.expected_duration_s is not None:
            self.say(f"llm-loadgen: duration sample: {sc.rate.probe_requests} sequential requests, E2E mean "
                     f"{self.expected_duration_s:.3g} s (the KV guard's duration for the first rate stage)")

    def learn(self, stats) -> None:
        """A rate stage's window closed: its E2E mean so far (requests finished by the close) is W
        for the next stage, never below the lower rates'."""
        if stats is not None and stats.e2e_s.count:
            self.expected_duration_s = max(stats.e2e_s.mean, self.expected_duration_s or 0.0)

    def decide(self, load: float):
        """The guard's ``Decision`` for a stage of ``load`` (concurrency, or requests/s)."""
        sc = self.rt.scenario
        capacity = self.capacity.tokens if self.capacity else None
        mix = scenario_mix(sc, self.rt.dataset)  # per request: loadgen.workload.mix (mean, burst, longest history)
        if sc.open_loop:
            in_flight = load * (self.expected_duration_s or 1.0)
            return decide_rate(load, self.expected_duration_s, capacity, *mix.split(in_flight),
                               sc.guard.margin, sc.guard.action)
        if self.spread and sc.guard.kv_capacity_tokens is None:
            return decide_spread(load, self.spread, *mix.split(load), sc.guard.margin, sc.guard.action)
        return decide(load, capacity, *mix.split(load), sc.guard.margin, sc.guard.action)

    def load_processes(self, rate_per_s: float | None = None) -> int:
        """Open loop: dispatcher users wanted, one per load-generating process (live workers)."""
        return max(len(self.fleet.live_workers()), 1) if self.fleet.master else 1
