"""Per-request timelines of the connector's own clocks: each side appends
stamps (request id, event, CLOCK_MONOTONIC nanoseconds) to one JSON-lines
file named by the ``timeline_file`` setting, so a benchmark can put a
request's lookup, allocation, load and report side by side with its first
token (docs/vllm.md, "Timelines").

CLOCK_MONOTONIC (time.monotonic_ns) is one clock for every process of a
Linux host, so stamps from the scheduler's process and each worker's
compare directly; perf_counter_ns would not. Each stamp is one O_APPEND
write (atomic for lines this short), so the sides need no coordination
and a stamp is on disk before the step that made it returns. Off (no
file) a stamp costs one attribute test.

Events (in the order a hit meets them):

| event | side | when |
| --- | --- | --- |
| lookup | scheduler | get_num_new_matched_tokens began (a hit or a miss) |
| alloc | scheduler | update_state_after_alloc: blocks given, the load is planned |
| load_issued | worker | start_load_kv sent the request's first retrieve |
| load_done | worker | the bytes of every retrieve of the request were seen in place |
| load_reported | worker | get_finished reported the load (loads between steps) |
| recv_reported | scheduler | update_connector_output saw every worker's report |
| scheduled | scheduler | the step that computes the request was scheduled |
| store_issued | worker | the request's first store of a step was sent |
"""

from __future__ import annotations

import json
import os
import time
from typing import Optional

EVENTS = ("lookup", "alloc", "load_issued", "load_done", "load_reported", "recv_reported",
          "scheduled", "store_issued")


class Timeline:
    """One side's stamps. Not thread-safe: stamped on the engine thread
    (or with a time taken elsewhere, passed as `ns`)."""

    def __init__(self, path: Optional[str], side: str) -> None:
        self._side = side
        self._fd = -1
        if path:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    @property
    def on(self) -> bool:
        return self._fd >= 0

    def stamp(self, req_id: str, event: str, ns: Optional[int] = None) -> None:
        if self._fd < 0:
            return
        line = json.dumps({"req": req_id, "event": event,
                           "ns": time.monotonic_ns() if ns is None else ns,
                           "side": self._side, "pid": os.getpid()})
        os.write(self._fd, (line + "\n").encode())

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read(path: str, since_ns: int = 0, until_ns: Optional[int] = None) -> list:
    """The stamps in `path` with since_ns <= ns <= until_ns, in time order."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a line being written
                if event["ns"] >= since_ns and (until_ns is None or event["ns"] <= until_ns):
                    out.append(event)
    except FileNotFoundError:
        return []
    out.sort(key=lambda e: e["ns"])
    return out
