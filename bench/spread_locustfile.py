"""The real locustfile, with each user's first request delayed by a uniform random 0..1 s (bench/ only).

Why: Locust starts users in batches, floor(spawn rate) of them at once every second
(locust/dispatch.py: ``_user_count_per_dispatch_iteration = max(1, floor(spawn_rate))``). Against
a server with a fixed schedule (the simulator's ``fixed`` model) a closed-loop batch stays in
lockstep for the whole run: its requests reach the server in the same millisecond, and the server
parses them one after the other, so the last ones start their 20 ms TTFT up to ~15 ms late
(bench/capacity.py measured TTFT p99 +15.9 ms at 256 streams with this file's delay absent, +2.7 ms
with it, the raw probe beside it +2.0 ms). That lateness is the server's queue, measured correctly;
a client-fidelity benchmark wants an even arrival pattern instead, like the probe's. Real servers
see such cohorts too (a ramp's batch): that is a property of the load, not of the client.

Everything else is exactly ``locustfile.py``; the delay is before the first request, outside
every measured interval.
"""

import random

import gevent

from loadgen.locust_face import users

FIRST_REQUEST_SPREAD_S = 1.0  # Locust's dispatch interval: one batch per second
_on_start = users.LLMUser.on_start


def _spread_on_start(self) -> None:
    _on_start(self)
    gevent.sleep(random.uniform(0.0, FIRST_REQUEST_SPREAD_S))


users.LLMUser.on_start = _spread_on_start

from locustfile import *  # noqa: E402,F401,F403
