"""Completion boards (docs/protocol.md "GPU-side completion"): the board
itself, the on-stream requests whose slots it holds, and the limits of
both. A request's BoardSignal travels whole: the C struct libkvstash filled
when the request was sent is what every later check and wait passes back."""

from __future__ import annotations

from concurrent.futures import Future
from ctypes import byref, c_void_p
from typing import Any, List, Optional

from . import _lib
from ._checks import uint_arg as _uint
from .errors import invalid
from .types import BoardSignal, ChunkOutcome


def max_board_slots() -> int:
    """Slots a completion board holds at most (KVSTASH_MAX_BOARD_SLOTS)."""
    return int(_lib.lib().kvstash_max_board_slots())


def max_layer_ranges() -> int:
    """Layer ranges a retrieve signals at most (KVSTASH_MAX_LAYER_RANGES)."""
    return int(_lib.lib().kvstash_max_layer_ranges())


def layer_range_begin(num_layers: int, ranges: int, k: int) -> int:
    """The first layer of layer range k (0 <= k <= ranges) of a retrieve
    with `ranges` ranges over a registration's `num_layers` layers, as
    kvstashd splits them: range k holds [begin(k), begin(k + 1))."""
    return int(_lib.lib().kvstash_layer_range_begin(
        _uint(num_layers, "num_layers"), _uint(ranges, "ranges"), _uint(k, "k")))


class CompletionBoard:
    """A completion board (docs/protocol.md "GPU-side completion"): slots in
    shared memory that the engine's and kvstashd's GPU streams write and wait
    on. `gpu` >= 0 maps it for that GPU's streams; -1: CPU only (host backend).
    Pass it to Client.register(board=...)."""

    def __init__(self, client: Any, slots: int = 256, gpu: int = -1) -> None:
        """`client`: the kvstash.Client whose connection creates the board."""
        self._client = client  # kept alive while the board is
        self._connection = client._connection
        self._lib = self._connection.lib
        handle = c_void_p()
        self._connection.call(self._lib.kvstash_board_create, _uint(slots, "slots"), int(gpu),
                              byref(handle))
        self._handle = handle
        self.slots: int = slots
        self.gpu: int = int(gpu)

    def released(self, signal: BoardSignal, k: int = 0) -> bool:
        """Whether slot `signal.slot + k` of a request's signal is released."""
        return self._released(_c_signal(signal), k)

    def _released(self, signal: _lib.CBoardSignal, k: int) -> bool:
        return bool(self._lib.kvstash_board_released(self._handle, byref(signal), k))

    def status(self, slot: int) -> int:
        """The slot's status word: 0 (OK) or the kvstash status of a failure."""
        if not 0 <= _uint(slot, "slot") < self.slots:
            raise invalid(f"slot {slot} is outside the board's {self.slots} slots")
        return int(self._lib.kvstash_board_status(self._handle, slot))

    def wait(self, stream: Any, signal: BoardSignal, k: int = 0) -> None:
        """Makes a CUDA stream (torch.cuda.current_stream().cuda_stream, or a
        torch.cuda.Stream) wait until slot `signal.slot + k` is released."""
        self._wait(stream, _c_signal(signal), _uint(k, "k"))

    def _wait(self, stream: Any, signal: _lib.CBoardSignal, k: int) -> None:
        self._connection.call(self._lib.kvstash_board_wait, self._handle,
                              c_void_p(stream_handle(stream)), byref(signal), k)

    def release(self, slot: int, sequence: int, status: int = 0) -> None:
        """Writes the slot's status word, then its value `sequence`: releases
        whatever waits on it. From the CPU this opens a store's gate
        (StreamRequest.open_gate) when it was given no stream."""
        if not 0 <= _uint(slot, "slot") < self.slots:
            raise invalid(f"slot {slot} is outside the board's {self.slots} slots")
        self._lib.kvstash_board_release(self._handle, slot, _uint(sequence, "sequence"),
                                        _uint(status, "status"))

    def close(self) -> None:
        if self._handle:
            self._lib.kvstash_board_destroy(self._handle)
            self._handle = c_void_p()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


_CUDA_STREAM_LEGACY = 0x1  # cudaStreamLegacy / CU_STREAM_LEGACY


def stream_handle(stream: Any) -> Optional[int]:
    """A cudaStream_t as an int: None (no stream), an int handle
    (torch.cuda.current_stream().cuda_stream), or an object with a
    `cuda_stream` attribute (a torch.cuda.Stream). Handle 0, CUDA's legacy
    default stream (torch's default stream), becomes cudaStreamLegacy: the
    C API reads a NULL stream as "no stream"."""
    if stream is None:
        return None
    handle = getattr(stream, "cuda_stream", stream)
    if isinstance(handle, bool) or not isinstance(handle, int) or not 0 <= handle < 1 << 64:
        raise invalid(
            f"stream must be an int cudaStream_t, a torch.cuda.Stream or None, got {stream!r}"
        )
    return handle or _CUDA_STREAM_LEGACY


class StreamRequest:
    """A retrieve_on_stream or store_on_stream request in flight
    (docs/protocol.md "GPU-side completion").

    `signal`: its BoardSignal (slot, count, sequence) on `board`.
    `outcomes`: a concurrent.futures.Future of the per-chunk outcomes (the
    CPU reply; `await asyncio.wrap_future(request.outcomes)` in asyncio).
    The slots are released whatever happens (failures too, with the error
    in their status words), so a stream waiting on them never hangs; the
    outcomes, or every slot's status once the last is released, say whether
    the bytes are all there.
    """

    __slots__ = ("board", "signal", "outcomes", "_c", "_chunks")

    def __init__(self, board: CompletionBoard, signal: _lib.CBoardSignal,
                 outcomes: "Future[List[ChunkOutcome]]", chunks: Any) -> None:
        """`signal`: the struct libkvstash filled when it sent the request."""
        self.board = board
        self.signal = BoardSignal(signal.slot, signal.count, signal.sequence)
        self.outcomes = outcomes
        self._c = signal  # passed as it is to every check and wait
        self._chunks = chunks  # the block ids stay alive until the reply

    def _k(self, k: int) -> int:
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < self.signal.count:
            raise invalid(f"k {k!r} is outside the request's {self.signal.count} slots [0, "
                          f"{self.signal.count})")
        return k

    def wait(self, stream: Any, k: int = 0) -> None:
        """Makes a CUDA stream (an int cudaStream_t such as
        torch.cuda.current_stream().cuda_stream, or a torch.cuda.Stream)
        wait, on the GPU, until slot k is released: a retrieve's layer range
        k is in place, or (store, k=1) the blocks may be reused. Needs a
        board made for a GPU (CompletionBoard(gpu=...))."""
        self.board._wait(stream, self._c, self._k(k))

    def released(self, k: int = 0) -> bool:
        """Non-blocking CPU check: whether slot k is released."""
        return self.board._released(self._c, self._k(k))

    def status(self, k: int = 0) -> int:
        """Slot k's status word: 0 (OK) or the kvstash status of what went
        wrong (NOT_FOUND for a missing chunk, ...); final once the request's
        last slot is released."""
        return self.board.status(self.signal.slot + self._k(k))

    @property
    def done(self) -> bool:
        """Whether every slot is released (the last one is released last)."""
        return self.released(self.signal.count - 1)

    def open_gate(self, status: int = 0) -> None:
        """A store given no stream: tells kvstashd from the CPU that the
        blocks are written (releases the gate, slot 0)."""
        self.board.release(self.signal.slot, self.signal.sequence, status)

    def result(self, timeout: Optional[float] = None) -> List[ChunkOutcome]:
        """The per-chunk outcomes, waiting for the CPU reply."""
        return self.outcomes.result(timeout)

    def __repr__(self) -> str:
        return f"<kvstash.StreamRequest {self.signal}>"


def _c_signal(signal: BoardSignal) -> _lib.CBoardSignal:
    if not isinstance(signal, BoardSignal):
        raise invalid(f"signal must be a kvstash.BoardSignal (StreamRequest.signal), got "
                      f"{signal!r}")
    return _lib.CBoardSignal(_uint(signal.slot, "signal.slot"), _uint(signal.count, "signal.count"),
                             _uint(signal.sequence, "signal.sequence"))
