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
from conftest import Daemon, needs_full_c_api

pytestmark = [pytest.mark.gpu, needs_full_c_api]


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
