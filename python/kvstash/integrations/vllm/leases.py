"""The scheduler's leases on its lookups' hits, held until the load they
protect has ended, then released on the scheduler's own connection (a lease
belongs to the connection that took it: a worker naming it would be told
NotFound).

A lease only has to keep the hit chunks in kvstashd until the load's
retrieve arrives there (kvstashd pins what a retrieve reads from then on).
The scheduler releases it once the load ended, whichever way:

- loads between steps (async_loads): when the workers report the request in
  finished_recving or failed_recving (update_connector_output); a request
  aborted meanwhile stays with vLLM until then.
- loads in the step: at the end of the step that carried the LoadSpec, which
  is the first step whose output vLLM processes after the step was built.
  vLLM processes each step's output once and in order (update_from_output,
  which ends with the scheduler connector's get_kv_connector_stats). With
  asynchronous scheduling the next step is built before that, so the leases
  are queued per built step, not released at the next build.
- a load never sent (its request finished first), a hit vLLM did not take:
  at once.

Should vLLM ever stop reporting step ends, a step's leases are released once
MAX_STEPS_IN_FLIGHT later steps were built: vLLM never runs that many steps
at once (one, or two with asynchronous scheduling, since the connector
refuses pipeline parallelism).
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Callable, Deque, Dict, Iterable, List, Tuple

MAX_STEPS_IN_FLIGHT = 4

Leases = Tuple[int, ...]


class LoadLeases:
    """Who holds which lease until when. `release` ends one lease on the
    connection that took it; it must not raise."""

    def __init__(self, release: Callable[[int], None]) -> None:
        self._release = release
        self._unsent: Dict[str, Leases] = {}        # LoadSpec built, not sent yet
        self._receiving: Dict[str, Leases] = {}     # loads between steps in flight
        self._steps: Deque[List[Leases]] = collections.deque()  # built steps' in-step loads

    def release(self, lease_ids: Iterable[int]) -> None:
        for lease in lease_ids:
            if lease:
                self._release(lease)

    # ---- the hooks ----

    def load_planned(self, req_id: str, lease_ids: Leases) -> None:
        """update_state_after_alloc gave the request a LoadSpec."""
        self.release(self._unsent.pop(req_id, ()))
        self._unsent[req_id] = lease_ids

    def step_built(self, loads: Iterable[Tuple[str, bool]]) -> None:
        """build_connector_meta sent these (request id, asynchronous) loads."""
        in_step: List[Leases] = []
        for req_id, async_load in loads:
            leases = self._unsent.pop(req_id, ())
            if async_load:
                self.release(self._receiving.pop(req_id, ()))
                self._receiving[req_id] = leases
            else:
                in_step.append(leases)
        self._steps.append(in_step)
        while len(self._steps) > MAX_STEPS_IN_FLIGHT:
            self._end_oldest_step()

    def step_ended(self) -> None:
        """vLLM processed the output of the oldest step still in flight."""
        if self._steps:
            self._end_oldest_step()

    def loads_ended(self, req_ids: Iterable[str]) -> None:
        """Workers reported these asynchronous loads done or failed."""
        for req_id in req_ids:
            self.release(self._receiving.pop(req_id, ()))

    def request_finished(self, req_id: str) -> None:
        """A load not sent yet never will be; one in flight keeps its lease."""
        self.release(self._unsent.pop(req_id, ()))

    def held(self) -> int:
        """Leases held for planned or running loads."""
        groups = [*self._unsent.values(), *self._receiving.values(),
                  *(leases for step in self._steps for leases in step)]
        return sum(1 for leases in groups for lease in leases if lease)

    def release_all(self) -> None:
        for leases in list(self._unsent.values()) + list(self._receiving.values()):
            self.release(leases)
        for step in self._steps:
            for leases in step:
                self.release(leases)
        self._unsent.clear()
        self._receiving.clear()
        self._steps.clear()

    def _end_oldest_step(self) -> None:
        for leases in self._steps.popleft():
            self.release(leases)


class Throttled:
    """A warning logged at most once per `every_s` seconds, saying how many
    like it were left out meanwhile."""

    def __init__(self, log: logging.Logger, every_s: float = 10.0) -> None:
        self._log = log
        self._every_s = every_s
        self._next = 0.0
        self._left_out = 0

    def warning(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now < self._next:
            self._left_out += 1
            return
        if self._left_out:
            message += " (%d more like it in the last %.0f s)"
            args = args + (self._left_out, self._every_s)
        self._log.warning(message, *args)
        self._next = now + self._every_s
        self._left_out = 0
