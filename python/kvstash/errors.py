"""Exceptions: one class per kvstash status code (the wire's ErrorCode)."""

from __future__ import annotations

from typing import Dict, Type


class Error(Exception):
    """A kvstash call failed. `code` is the kvstash_status value, `message`
    the library's explanation."""

    code: int = -1

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code}, {self.message!r})"

    def __reduce__(self):
        return (type(self), (self.code, self.message))


class InvalidArgument(Error, ValueError):
    """An argument is out of its allowed range or shape (status 1)."""


class MalformedMessage(Error):
    """The daemon could not parse a message (status 2)."""


class UnsupportedVersion(Error):
    """Client and daemon speak different protocol versions (status 3)."""


class NotFound(Error, LookupError):
    """No such registration, lease or scope (status 4)."""


class OutOfRange(Error, ValueError):
    """A block id, extent or count past its limit (status 5)."""


class TooLarge(Error, ValueError):
    """A request bigger than the daemon accepts (status 6)."""


class ResourceExhausted(Error):
    """The daemon ran out of a resource (status 7)."""


class Unavailable(Error, ConnectionError):
    """kvstashd is not reachable, went away, or a feature is missing (status 8)."""


class DeviceError(Error):
    """A CUDA call failed (status 9)."""


class TimedOut(Error, TimeoutError):
    """The request passed its deadline (status 10)."""


class Internal(Error):
    """A bug in kvstash (status 11)."""


class Cancelled(Error):
    """The client was closed while the request was pending (status 12)."""


_BY_CODE: Dict[int, Type[Error]] = {
    1: InvalidArgument,
    2: MalformedMessage,
    3: UnsupportedVersion,
    4: NotFound,
    5: OutOfRange,
    6: TooLarge,
    7: ResourceExhausted,
    8: Unavailable,
    9: DeviceError,
    10: TimedOut,
    11: Internal,
    12: Cancelled,
}


def error_for(code: int, message: str) -> Error:
    """The exception for a non-zero kvstash_status."""
    cls = _BY_CODE.get(int(code), Error)
    return cls(int(code), message)


def invalid(message: str) -> InvalidArgument:
    return InvalidArgument(1, message)


__all__ = ["Error", "error_for", "invalid"] + [c.__name__ for c in _BY_CODE.values()]
