"""Connection: one libkvstash handle and the calls made through it.

A Client owns one and hands it to the Registrations and CompletionBoards it
makes, so that they call the library without reaching into the Client.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from ctypes import byref, c_void_p
from typing import Any, Optional

from . import _lib
from ._dispatch import Dispatcher
from .errors import Cancelled, Error, error_for


class Connection:
    """A connected libkvstash handle: blocking calls, asynchronous calls
    through one dispatcher thread (started on first use), and closing,
    which waits for the blocking calls still inside the library.
    Owned by its Client, which closes it. Thread-safe."""

    def __init__(self, lib: _lib.Library, handle: c_void_p, name: str) -> None:
        self.lib = lib
        self.handle = handle
        self._name = name
        self._state = threading.Condition()
        self._closed = False  # GUARDED_BY(_state)
        self._active = 0  # GUARDED_BY(_state): blocking calls inside the library
        self._dispatcher: Optional[Dispatcher] = None  # GUARDED_BY(_state), started on first use

    @property
    def closed(self) -> bool:
        return self._closed

    def _enter(self) -> c_void_p:
        with self._state:
            if self._closed:
                raise Cancelled(12, "the kvstash client is closed")
            self._active += 1
            return self.handle

    def _leave(self) -> None:
        with self._state:
            self._active -= 1
            if self._active == 0 and self._closed:
                self._state.notify_all()

    def error(self, status: int) -> Error:
        """The exception for `status`, with this thread's last message."""
        message = self.lib.kvstash_last_error(self.handle)
        text = message.decode(errors="replace") if message else ""
        return error_for(status, text or _lib.status_name(status))

    def call(self, fn: Any, *args: Any) -> None:
        """fn(handle, *args); raises on a non-OK status."""
        handle = self._enter()
        try:
            status = fn(handle, *args)
            if status != 0:
                raise self.error(status)
        finally:
            self._leave()

    def _dispatch(self) -> Dispatcher:
        dispatcher = self._dispatcher
        if dispatcher is not None:
            return dispatcher
        with self._state:
            if self._closed:
                raise Cancelled(12, "the kvstash client is closed")
            if self._dispatcher is None:
                self._dispatcher = Dispatcher(self.lib, self.handle, self._name)
            return self._dispatcher

    def submit(self, kind: int, fn: Any, *args: Any) -> Future:
        """fn(handle, *args, tag, call) through the dispatcher: a Future of
        the reply of `kind` (_dispatch.KIND_*). Errors, a closed connection
        included, arrive through the Future."""
        try:
            dispatcher = self._dispatch()
            handle = self._enter()
        except Error as e:
            f: Future = Future()
            f.set_exception(e)
            return f
        try:
            return dispatcher.submit(kind, lambda tag, call: fn(handle, *args, tag, byref(call)),
                                     self.error)
        finally:
            self._leave()

    def close(self) -> None:
        """Cancels pending asynchronous calls (their futures fail with
        Cancelled) and closes the handle. Idempotent."""
        with self._state:
            if self._closed:
                return
            self._closed = True
            while self._active > 0:
                self._state.wait()
            dispatcher = self._dispatcher
        if dispatcher is not None:
            dispatcher.stop()
        self.lib.kvstash_close(self.handle)
        if dispatcher is not None:
            dispatcher.drain()
