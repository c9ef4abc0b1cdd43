"""The one thread per client that resolves asynchronous calls.

Each *_async call is submitted with kvstash_*_submit and a tag; the
dispatcher sleeps in poll() on kvstash_completion_fd (GIL released), takes
completed calls in batches with kvstash_take_completed and resolves their
concurrent.futures.Future. No thread is blocked per call.

Done-callbacks of those futures (and asyncio's wrap_future hand-off) run on
this thread: they must not block.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import select
import threading
from concurrent.futures import Future, InvalidStateError
from typing import Any, Callable, Dict, List, Optional

from ._lib import CLookupResult, COutcome, Library, lookup_result
from .errors import Cancelled, Error, error_for
from .types import ChunkOutcome, ChunkResult

_BATCH = 64

# How a completed call's result becomes a Python value.
KIND_OUTCOMES = 0
KIND_LOOKUP = 1
KIND_RELEASE = 2


def outcomes_from(buf: Any, n: int) -> List[ChunkOutcome]:
    return [
        ChunkOutcome(ChunkResult(o.result), o.num_tokens, o.error) for o in buf[:n]
    ]


class _Pending:
    __slots__ = ("future", "kind", "call")

    def __init__(self, future: Future, kind: int) -> None:
        self.future = future
        self.kind = kind
        self.call: Optional[int] = None  # set once submitted, unless already completed


def _settle(future: Future, value: Any = None, error: Optional[BaseException] = None) -> None:
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
    except InvalidStateError:
        pass  # the caller cancelled it: nobody wants the result


class Dispatcher:
    """Owns the pending-call table and the thread waiting on the completion fd."""

    def __init__(self, lib: Library, handle: ctypes.c_void_p, name: str) -> None:
        self._lib = lib
        self._handle = handle
        self._fd = lib.kvstash_completion_fd(handle)
        if self._fd < 0:
            raise error_for(8, "kvstash_completion_fd returned no descriptor")
        self._wake_r, self._wake_w = os.pipe()
        self._lock = threading.Lock()
        self._pending: Dict[int, _Pending] = {}  # GUARDED_BY(_lock)
        self._tags = itertools.count(1)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"kvstash-dispatch-{name}", daemon=True)
        self._thread.start()

    def submit(self, kind: int, submit: Callable[[int, ctypes.c_void_p], int],
               describe_error: Callable[[int], Error]) -> Future:
        """Runs submit(tag, call_out) (a kvstash_*_submit) and returns the
        Future its completion resolves; a failed submit fails the Future."""
        future: Future = Future()
        tag = next(self._tags)
        entry = _Pending(future, kind)
        with self._lock:
            if self._stopping:
                _settle(future, error=Cancelled(12, "the kvstash client is closed"))
                return future
            self._pending[tag] = entry
        call = ctypes.c_void_p()
        status = submit(tag, call)
        if status != 0:
            with self._lock:
                self._pending.pop(tag, None)
            _settle(future, error=describe_error(status))
            return future
        with self._lock:
            if tag in self._pending:  # not completed yet: close() may need it
                entry.call = call.value
        return future

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        calls = (ctypes.c_void_p * _BATCH)()
        take = self._lib.kvstash_take_completed
        while True:
            try:
                poller.poll()
            except InterruptedError:  # pragma: no cover - PEP 475 retries for us
                continue
            if self._stopping:
                return
            while True:
                n = take(self._handle, calls, _BATCH)
                for i in range(n):
                    call = calls[i]
                    if call:
                        self._complete(call)
                if n < _BATCH:
                    break

    def _complete(self, call: int) -> None:
        lib = self._lib
        tag = lib.kvstash_call_user_data(call)
        with self._lock:
            entry = self._pending.pop(tag, None)
        if entry is None:  # pragma: no cover - every call we submit is in the table
            lib.kvstash_call_free(call)
            return
        value, error = self._result(call, entry.kind)
        lib.kvstash_call_free(call)
        _settle(entry.future, value, error)

    def _result(self, call: int, kind: int):
        lib = self._lib
        status = lib.kvstash_call_status(call)
        if status != 0:
            message = lib.kvstash_call_error(call)
            return None, error_for(status, message.decode(errors="replace") if message else "")
        if kind == KIND_OUTCOMES:
            n = lib.kvstash_call_outcomes(call, None, 0)
            buf = (COutcome * max(n, 1))()
            lib.kvstash_call_outcomes(call, buf, n)
            return outcomes_from(buf, n), None
        result = CLookupResult()
        lib.kvstash_call_lookup_result(call, ctypes.byref(result))
        if kind == KIND_LOOKUP:
            return lookup_result(result), None
        return int(result.hit_chunks), None

    def stop(self) -> None:
        """Stops the thread; pending calls stay in the table for drain()."""
        with self._lock:
            self._stopping = True
        os.write(self._wake_w, b"x")
        if threading.current_thread() is not self._thread:
            self._thread.join()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def drain(self) -> None:
        """After kvstash_close: fails what was still pending with Cancelled
        (or the call's own result, if it completed meanwhile) and frees it."""
        with self._lock:
            pending = list(self._pending.values())
            self._pending.clear()
        for entry in pending:
            if entry.call is not None and self._lib.kvstash_call_done(entry.call):
                value, error = self._result(entry.call, entry.kind)
            else:
                value, error = None, Cancelled(12, "the kvstash client was closed")
            if entry.call is not None:
                self._lib.kvstash_call_free(entry.call)
            _settle(entry.future, value, error)
