"""bench/vllm_serving.py's parts that need no GPU: the workload, the checks
of its arguments, the figures of a run, the lease check and the table, so a
GPU run does not fail on them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import vllm_serving as bench  # noqa: E402


def args_of(*argv: str):
    return bench.parser().parse_args(["--mode", "kvstash", *argv])


def test_the_default_arguments_pass_their_checks_and_the_working_set_outgrows_the_gpu():
    args = args_of()
    assert bench.check_args(args) == []
    w = bench.describe_workload(args, bench.build_workload(args))
    assert w["gpu_kv_gib"] < w["working_set_gib"] < args.offload_gb
    # A request mostly repeats a prefix: 80%+ of its prompt can come from a cache.
    assert w["shared_share_of_prompt"] > 0.8


def test_the_workload_is_poisson_arrivals_over_shared_chunk_aligned_prefixes():
    args = args_of("--rate", "50", "--duration", "200", "--prefixes", "16", "--seed", "3")
    w = bench.build_workload(args)
    assert all(args.prefix_min <= len(p) <= args.prefix_max and len(p) % 256 == 0
               for p in w.prefixes)
    arrivals = [r.arrival_s for r in w.requests]
    assert arrivals == sorted(arrivals) and 0 < arrivals[0] and arrivals[-1] < 200
    assert len(arrivals) == pytest.approx(50 * 200, rel=0.05)
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    # Exponential gaps: the standard deviation is the mean.
    mean = sum(gaps) / len(gaps)
    sd = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5
    assert sd == pytest.approx(mean, rel=0.1)
    for r in w.requests[:50]:
        assert r.tokens[:r.prefix_tokens] == w.prefixes[r.prefix]
        assert len(r.tokens) == r.prefix_tokens + args.suffix
    # Unique suffixes; every prefix served once in the warm-up.
    assert len({tuple(r.tokens[r.prefix_tokens:]) for r in w.requests}) == len(w.requests)
    assert sorted(r.prefix for r in w.warmup) == list(range(16))
    # The same arguments give the same workload.
    again = bench.build_workload(args)
    assert [r.tokens for r in again.requests[:20]] == [r.tokens for r in w.requests[:20]]


@pytest.mark.parametrize("argv, message", [
    (["--prefix-min", "1000"], "--prefix-min is 1000, not a multiple"),
    (["--prefix-max", "512", "--prefix-min", "1024"], "--prefix-max 512 is below"),
    (["--gpu-kv-gb", "100"], "fits in --gpu-kv-gb 100"),
    (["--offload-gb", "20"], "over 90% of --offload-gb 20"),
    (["--gpu-kv-gb", "1.5"], "fewer than two of the longest"),
    (["--rate", "0"], "--rate is 0.0, at least"),
    (["--model", "gpt-9"], "--model gpt-9 is none of"),
])
def test_bad_arguments_are_refused_before_any_engine_starts(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--mode", "native", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_dry_run_prints_the_workload_without_a_gpu(capsys):
    assert bench.main(["--mode", "kvstash-multipath", "--dry-run", "--duration", "20"]) == 0
    w = json.loads(capsys.readouterr().out)
    assert w["requests"] > 0 and w["gpu_blocks"] == bench.gpu_blocks(args_of())


def outcome(sent, ttft, itl, tokens=4, cached=900, prompt=1000, prefix=950, error=None):
    o = bench.Outcome(prompt, prefix, 0.0, sent=sent, error=error)
    if error is None:
        o.first = sent + ttft
        o.itl_ms = [itl * 1000] * (tokens - 1)
        o.done = o.first + itl * (tokens - 1)
        o.output_tokens = tokens
        o.cached_tokens = cached
    return o


def test_the_figures_of_a_run_and_its_errors():
    runs = [outcome(0.0, 0.1, 0.01), outcome(0.5, 0.3, 0.02), outcome(1.0, 0.2, 0.01)]
    s = bench.summarize(runs, output_tokens=4)
    assert s["errors"] == [] and s["completed"] == 3
    assert s["ttft_p50_ms"] == pytest.approx(200) and s["ttft_p99_ms"] == pytest.approx(300)
    assert s["itl_p50_ms"] == pytest.approx(10)
    assert s["wall_s"] == pytest.approx(1.23) and s["requests_per_s"] == pytest.approx(3 / 1.23)
    assert s["output_tokens_per_s"] == pytest.approx(12 / 1.23)
    assert s["cached_share_of_prompt"] == pytest.approx(0.9)
    assert s["prefix_hit_rate"] == pytest.approx(900 / 950)
    # An arrival still waiting for a slot when the arrivals ended is dropped, no error.
    late = bench.Outcome(1000, 950, lag_s=5.0, sent=9.0, dropped=True)
    with_late = bench.summarize(runs + [late], output_tokens=4)
    assert with_late["errors"] == [] and with_late["dropped"] == 1
    assert with_late["requests"] == 4 and with_late["completed"] == 3
    bad = bench.summarize(runs + [outcome(2.0, 0.1, 0.01, tokens=2),
                                  outcome(2.0, 0, 0, error="req-9: EngineDeadError")], 4)
    assert "req-9: EngineDeadError" in bad["errors"]
    assert any("other than 4 tokens" in e for e in bad["errors"])


def test_a_lease_held_or_expired_is_an_error():
    ok = {"leases_granted": 10, "leases_released": 10, "leases_expired": 0,
          "leases_truncated": 0, "leases_held_when_idle": 0}
    assert bench.lease_errors(ok) == []
    assert bench.lease_errors({**ok, "leases_released": 8, "leases_expired": 2})
    assert bench.lease_errors({**ok, "leases_released": 9, "leases_held_when_idle": 1})


def test_the_table_puts_the_runs_side_by_side_with_ratios_to_native(tmp_path, capsys):
    def write(mode, ttft, tps, errors=(), kvstash=None):
        run = {"mode": mode, "gpu": "H200", "vllm": "0.26.0", "engine_start_s": 60,
               "workload": {"requests": 100, "offered_rate_per_s": 5, "working_set_gib": 36,
                            "gpu_kv_gib": 16},
               "ttft_p50_ms": ttft, "ttft_p90_ms": 2 * ttft, "ttft_p99_ms": 3 * ttft,
               "itl_p50_ms": 12.0, "requests_per_s": 5.0, "output_tokens_per_s": tps,
               "mean_in_flight": 20.0, "cached_share_of_prompt": 0.85, "prefix_hit_rate": 0.9,
               "errors": list(errors)}
        if kvstash:
            run["kvstash"] = kvstash
        (tmp_path / f"serving-{mode}.json").write_text(json.dumps(run))

    write("native", 100.0, 200.0)
    write("kvstash", 50.0, 300.0, kvstash={"leases_granted": 7, "leases_released": 7,
                                           "leases_expired": 0, "leases_truncated": 0})
    write("recompute", 400.0, 100.0)
    assert bench.table(tmp_path) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert [r.split("|")[1].strip() for r in rows[2:]] == ["recompute", "native", "kvstash"]
    kvstash_row = rows[4]
    assert "| 0.50 | 0.50 | 1.50 | 7 / 7 / 0 / 0 |" in kvstash_row
    write("kvstash-layerwise", 60.0, 280.0, errors=["3 kvstash leases expired"])
    assert bench.table(tmp_path) == 1
    assert "ERRORS: 3 kvstash leases expired" in capsys.readouterr().out
