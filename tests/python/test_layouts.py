"""Registration of every engine layout kvstash infers, in host_tensor
memory, and a byte-exact round trip through kvstashd: blocks stored from one
set of blocks come back, retrieved into another, and no other block changes."""

from __future__ import annotations

import random

import pytest

import kvstash

import layout_cases
from conftest import has_torch
from layout_cases import NUMPY_CASES, block, fill_random

np = pytest.importorskip("numpy")

# 2.5 chunks of 16 (a partial last chunk) where blocks of 8 or fewer allow
# it in whole blocks; 3 chunks for blocks of 16.


def round_trip(client, case, model: str, seed: int = 1) -> None:
    fill_random(case.bases, seed)
    reg = client.register(case.layers, model=model, layout=case.layout)
    assert reg.geometries[0] == case.expected
    assert reg.num_layers == case.num_layers
    assert reg.block_tokens == case.block_tokens
    bt = case.block_tokens
    TOKENS = 40 if 8 % bt == 0 else 48
    n_blocks = -(-TOKENS // bt)
    num_blocks = case.expected.num_blocks
    ids = list(range(num_blocks))
    random.Random(seed).shuffle(ids)
    src, dst = ids[:n_blocks], ids[n_blocks:2 * n_blocks]
    tokens = np.arange(1000 * seed, 1000 * seed + TOKENS, dtype=np.int32)

    stored = reg.store(reg.chunks(tokens, np.array(src, dtype=np.int32)))
    assert [o.result for o in stored] == [kvstash.ChunkResult.STORED] * 3
    assert [o.num_tokens for o in stored] == [16, 16, TOKENS - 32]

    before = [[block(v, b) for b in range(num_blocks)] for v in case.views]
    hit = reg.lookup(reg.chunk_keys(tokens))
    assert (hit.hit_chunks, hit.hit_tokens) == (3, TOKENS)

    got = reg.retrieve(reg.chunks(tokens, np.array(dst, dtype=np.int32)))
    assert all(o.result == kvstash.ChunkResult.RETRIEVED for o in got), got
    for part, v in enumerate(case.views):
        for s, d in zip(src, dst):
            assert np.array_equal(block(v, d), before[part][s]), (case.name, part, s, d)
        for b in set(range(num_blocks)) - set(dst):
            assert np.array_equal(block(v, b), before[part][b]), (case.name, part, b)
    reg.unregister()


@pytest.mark.parametrize("make", NUMPY_CASES, ids=lambda f: f.__name__)
def test_numpy_layout_round_trip(client, make):
    round_trip(client, make("numpy", "cpu"), model=f"np-{make.__name__}")


@pytest.mark.skipif(not has_torch(), reason="torch is not installed")
@pytest.mark.parametrize("name,make", layout_cases.torch_cases() if has_torch() else [],
                         ids=lambda x: x if isinstance(x, str) else "")
def test_torch_layout_round_trip(client, name, make):
    round_trip(client, make("torch", "cpu"), model=f"torch-{name}")


def test_two_registrations_of_one_model_share_chunks(client):
    a = layout_cases.vllm_flash_nhd("numpy", "cpu")
    b = layout_cases.vllm_flash_nhd("numpy", "cpu")
    fill_random(a.bases, 7)
    ra = client.register(a.layers, model="shared")
    rb = client.register(b.layers, model="shared")
    tokens = list(range(32))
    ra.store(ra.chunks(tokens, [0, 1, 2, 3]))
    assert rb.lookup(rb.chunk_keys(tokens)).hit_chunks == 2
    rb.retrieve(rb.chunks(tokens, [4, 5, 6, 7]))
    assert np.array_equal(b.bases[1][:, 4:8].view(np.uint16), a.bases[1][:, 0:4].view(np.uint16))


def test_models_and_tenants_do_not_share_keys(client):
    case = layout_cases.vllm_flash_nhd("numpy", "cpu")
    tokens = list(range(16))
    r1 = client.register(case.layers, model="m1")
    r2 = client.register(case.layers, model="m2")
    r3 = client.register(case.layers, model="m1", tenant="t")
    keys = {bytes(r.chunk_keys(tokens)[0]) for r in (r1, r2, r3)}
    assert len(keys) == 3


# ---- what registration refuses, and why ----

def _kv(shape=(2, 12, 8, 2, 8), dtype="float16"):
    return kvstash.host_tensor(shape, getattr(np, dtype))


@pytest.mark.parametrize(
    "layers,layout,message",
    [
        (lambda: [np.zeros((2, 12, 8, 2, 8), np.float16)], None, "not in kvstash shared memory"),
        (lambda: [_kv((2, 12, 8, 2, 16))[..., ::2]], None, "must be contiguous"),
        (lambda: [_kv((12, 8))], None, "cannot infer the layout of shape \\[12, 8\\]"),
        (lambda: [_kv((12, 2, 8, 7))], None, "two halves of the last dimension"),
        (lambda: [_kv((3, 12, 8, 2, 8))], None, "needs K/V \\(size 2\\) in dimension 0"),
        (lambda: [_kv((2, 2, 8, 2, 8))], None, "pass layout='vllm_flash' or 'flashinfer'"),
        (lambda: [_kv(dtype="float64")], None, "dtype float64 is not a KV element type"),
        (lambda: [_kv()], "paged", "layout 'paged' is not one of"),
        (lambda: [_kv()], "mla", "layout 'mla' expects a rank-3 tensor"),
        (lambda: [_kv()], {"x": "mla"}, "a dict of layouts needs layers as a dict"),
        (lambda: [_kv()[:, ::-1]], None, "negative strides"),
        (lambda: [], None, "layers is empty"),
        (lambda: "kv", None, "expected a list of tensors"),
        (lambda: [_kv()],
         kvstash.Geometry.vllm_flash_nhd(100, 8, 2, 16), "the geometry spans"),
        (lambda: [(_kv((12, 2, 8)),)], None, "\\(K, V\\) pair"),
        (lambda: [_kv((2, 12, 0, 2, 8))], None, "is empty"),
    ],
    ids=["plain-numpy", "strided-head", "rank-2", "odd-kv-content", "no-kv-dim", "ambiguous", "float64",
         "unknown-name", "wrong-rank-for-name", "layout-dict-for-list", "negative-stride", "empty", "not-tensors",
         "geometry-too-big", "half-pair", "zero-size"],
)
def test_unsupported_tensors_are_refused_with_what_was_expected(client, layers, layout, message):
    with pytest.raises(kvstash.InvalidArgument, match=message):
        client.register(layers(), model="bad", layout=layout)


def test_daemon_checks_geometry_too(client):
    kv = _kv()
    g = kvstash.Geometry(12, 2, 8, 2, 16, block_stride=16, kv_stride=0, token_stride=0,
                         head_stride=0, dtype=kvstash.DType.F16)
    with pytest.raises(kvstash.InvalidArgument, match="overlap"):
        client.register([kv], model="bad", layout=g)


def test_block_size_must_divide_chunk_tokens(client):
    with pytest.raises(kvstash.InvalidArgument):
        client.register([_kv((2, 12, 5, 2, 8))], model="bad")


def test_bad_model_names_are_refused(client):
    with pytest.raises(kvstash.InvalidArgument, match="model"):
        client.register([_kv()], model="")


def test_host_tensor_names_and_lifetime():
    import gc
    import os

    t = kvstash.host_tensor((4, 4), np.float32, name="kvstash-pytest-named")
    assert kvstash.shm_name_of(t) == "/kvstash-pytest-named"
    assert kvstash.shm_name_of(t[1:]) == "/kvstash-pytest-named"
    assert os.path.exists("/dev/shm/kvstash-pytest-named")
    with pytest.raises(kvstash.InvalidArgument, match="already exists"):
        kvstash.host_tensor((4,), np.float32, name="kvstash-pytest-named")
    del t
    gc.collect()
    assert not os.path.exists("/dev/shm/kvstash-pytest-named")


def test_mla_is_stored_once_per_model_and_attention_per_rank(client):
    """Keys of an MLA latent (vllm_mla) do not depend on the tensor-parallel
    rank; keys of K/V heads (vllm) do."""
    tokens = list(range(16))
    mla = layout_cases.vllm_mla_view("numpy", "cpu", latent=64)
    attn = layout_cases.vllm_lbnhc("numpy", "cpu")
    mla_keys = {client.register(mla.layers, model="tp", layout="vllm_mla", tp_rank=r,
                                tp_size=2).chunk_keys(tokens)[0] for r in (0, 1)}
    attn_keys = {client.register(attn.layers, model="tp", tp_rank=r,
                                 tp_size=2).chunk_keys(tokens)[0] for r in (0, 1)}
    assert len(mla_keys) == 1
    assert len(attn_keys) == 2


def test_sglang_token_pools_are_stored_per_rank(client):
    """An SGLang token pool's K and V layers have kv_count 1 like an MLA
    latent, but each rank holds its own heads: ranks never share its chunks.
    A rank-3 tensor inferred as `mla` stays per rank too: only a name (or the
    engine's explicit word) makes a registration shared by every rank."""
    tokens = list(range(16))
    pool = layout_cases.sglang_token_pool("numpy", "cpu")
    regs = [client.register(pool.layers, model="tp", tp_rank=r, tp_size=2) for r in (0, 1)]
    assert regs[0].namespace_id != regs[1].namespace_id
    assert regs[0].chunk_keys(tokens)[0] != regs[1].chunk_keys(tokens)[0]
    inferred = layout_cases.mla("numpy", "cpu")
    keys = {client.register(inferred.layers, model="tp", tp_rank=r,
                            tp_size=2).chunk_keys(tokens)[0] for r in (0, 1)}
    assert len(keys) == 2
    stated = {client.register(pool.layers, model="tp", tp_rank=r, tp_size=2,
                              replicated_across_ranks=True).chunk_keys(tokens)[0] for r in (0, 1)}
    assert len(stated) == 1


def test_tp_rank_must_be_below_tp_size(client):
    with pytest.raises(kvstash.InvalidArgument, match="tp_rank"):
        client.register([_kv()], model="tp", tp_rank=2, tp_size=2)
