"""GPU: CUDA registration from torch tensors in every layout, and a
byte-exact round trip through kvstashd --backend cuda (CUDA IPC). Marked
`gpu`; skipped, saying why, without torch, CUDA or a GPU. Run them on a GPU
machine with scripts/gpu_python_tests.sh."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import kvstash

import layout_cases
from kvstashd_process import Daemon

pytestmark = [pytest.mark.gpu]


def _why_no_gpu():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    return None


_NO_GPU = _why_no_gpu()
if _NO_GPU:
    pytestmark.append(pytest.mark.skip(reason=f"GPU tests: {_NO_GPU}"))


@pytest.fixture(scope="module")
def cuda_daemon():
    d = Daemon(backend="cuda", l1_gb=1)
    yield d
    d.close()


@pytest.fixture
def gpu_client(cuda_daemon):
    with kvstash.Client(socket=cuda_daemon.socket, name="pytest-gpu") as c:
        assert c.server_info.backend == "cuda"
        yield c


@pytest.mark.parametrize("name,make", layout_cases.torch_cases(),
                         ids=lambda x: x if isinstance(x, str) else "")
def test_cuda_layout_round_trip(gpu_client, name, make):
    from test_layouts import round_trip

    round_trip(gpu_client, make("torch", "cuda"), model=f"gpu-{name}")


def test_layers_in_one_allocation_register_as_one_group(gpu_client):
    """Six layers carved out of one CUDA allocation (one IPC handle) are six
    layers of one geometry group for the daemon."""
    import torch

    arena = torch.zeros((6, 2, 12, 8, 2, 8), dtype=torch.float16, device="cuda")
    reg = gpu_client.register([arena[i] for i in range(6)], model="one-arena")
    mine = [r for r in gpu_client.describe()["registrations"] if r["id"] == reg.id]
    assert len(mine) == 1 and mine[0]["num_layers"] == 6 and len(mine[0]["groups"]) == 1
    reg.unregister()


def test_host_and_cuda_tensors_cannot_mix(gpu_client):
    import torch

    gpu = torch.zeros((2, 12, 8, 2, 8), dtype=torch.float16, device="cuda")
    host = kvstash.host_tensor((2, 12, 8, 2, 8), torch.float16)
    with pytest.raises(kvstash.InvalidArgument, match="several devices"):
        gpu_client.register([gpu, host], model="mixed")


def test_store_waits_for_the_engine_stream(gpu_client):
    """With stream=, the KV a kernel is still writing on that stream is what
    gets stored."""
    import torch

    kv = torch.zeros((2, 12, 8, 2, 64), dtype=torch.float16, device="cuda")
    reg = gpu_client.register([kv], model="stream")
    stream = torch.cuda.Stream()
    tokens = list(range(16))
    with torch.cuda.stream(stream):
        torch.cuda._sleep(50_000_000)  # keep the stream busy before the write lands
        kv[:, 0:2].fill_(3.0)
    assert all(o.ok for o in reg.store(reg.chunks(tokens, [0, 1]), stream=stream))
    reg.retrieve(reg.chunks(tokens, [4, 5]))
    assert torch.equal(kv[:, 4:6], torch.full_like(kv[:, 4:6], 3.0))


def _board_registration(gpu_client, model):
    """Four CUDA layers registered with a completion board mapped for this GPU."""
    import torch

    board = kvstash.CompletionBoard(gpu_client, slots=16, gpu=torch.cuda.current_device())
    kv = [torch.zeros((2, 12, 8, 2, 64), dtype=torch.float16, device="cuda") for _ in range(4)]
    reg = gpu_client.register(kv, model=model, board=board)
    return board, kv, reg


def test_a_stream_waiting_on_a_layer_range_sees_its_bytes(gpu_client):
    """retrieve_on_stream: a torch stream that waits on layer range k (no
    host wait) sees range k's layers in place in its very next kernel; with
    one range and a stream, the stream waits already when the call returns."""
    import torch

    board, kv, reg = _board_registration(gpu_client, "on-stream-gpu")
    try:
        tokens = list(range(32))  # 2 chunks, blocks 0..3
        for t in kv:
            t[:, 0:4].copy_(torch.randn_like(t[:, 0:4]))
            t[:, 4:12].zero_()
        torch.cuda.synchronize()
        assert all(o.ok for o in reg.store(reg.chunks(tokens, [0, 1, 2, 3])))

        def same(i, blocks):  # on the current stream, no host sync
            return (kv[i][:, blocks].view(torch.int16) == kv[i][:, 0:4].view(torch.int16)).all()

        stream = torch.cuda.Stream()
        request = reg.retrieve_on_stream(reg.chunks(tokens, [4, 5, 6, 7]),
                                         stream=stream.cuda_stream, layer_ranges=2)
        assert request.signal.count == 2
        seen = []
        with torch.cuda.stream(stream):
            for k, layers in enumerate(([0, 1], [2, 3])):
                request.wait(stream.cuda_stream, k)
                seen.append(torch.stack([same(i, slice(4, 8)) for i in layers]).all())
        stream.synchronize()
        assert [bool(s) for s in seen] == [True, True]
        assert [o.result for o in request.result(10)] == [kvstash.ChunkResult.RETRIEVED] * 2
        assert request.status(0) == 0 and request.status(1) == 0

        # One range and a stream (a torch.cuda.Stream object): the stream
        # already waits when retrieve_on_stream returns.
        current = torch.cuda.current_stream()
        request = reg.retrieve_on_stream(reg.chunks(tokens, [8, 9, 10, 11]), stream=current)
        check = torch.stack([same(i, slice(8, 12)) for i in range(4)]).all()
        assert bool(check)
        assert all(o.ok for o in request.result(10))
    finally:
        reg.unregister()
        board.close()


def test_a_store_on_stream_reads_what_the_stream_wrote_before_it(gpu_client):
    """store_on_stream: kvstashd reads the blocks only after the engine's
    stream got past the call (no host wait), and the stream may overwrite
    them once it waited on slot 1."""
    import torch

    board, kv, reg = _board_registration(gpu_client, "on-stream-gpu-store")
    try:
        tokens = list(range(100, 132))
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            torch.cuda._sleep(50_000_000)  # keep the stream busy before the writes land
            for i, t in enumerate(kv):
                t[:, 0:4].fill_(float(i + 1))
        request = reg.store_on_stream(reg.chunks(tokens, [0, 1, 2, 3]), stream=stream)
        with torch.cuda.stream(stream):
            request.wait(stream, 1)  # the blocks may be reused
            for t in kv:
                t[:, 0:4].fill_(-1.0)
        assert [o.result for o in request.result(10)] == [kvstash.ChunkResult.STORED] * 2
        stream.synchronize()
        assert all(o.ok for o in reg.retrieve(reg.chunks(tokens, [4, 5, 6, 7])))
        for i, t in enumerate(kv):
            assert torch.equal(t[:, 4:8], torch.full_like(t[:, 4:8], float(i + 1))), f"layer {i}"
    finally:
        reg.unregister()
        board.close()


def test_expandable_segments_are_refused_with_the_fix(cuda_daemon):
    code = (
        "import torch, kvstash\n"
        f"c = kvstash.Client(socket={cuda_daemon.socket!r})\n"
        "kv = torch.zeros((2, 64, 16, 8, 128), dtype=torch.float16, device='cuda')\n"
        "try:\n"
        "    c.register([kv], model='vmm')\n"
        "except kvstash.InvalidArgument as e:\n"
        "    print('REFUSED', e)\n"
    )
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert "REFUSED" in out.stdout, out.stdout + out.stderr
    assert "expandable_segments" in out.stdout
