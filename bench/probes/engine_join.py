#!/usr/bin/env python3
"""Where an engine-visible retrieve's time goes, from the engine's call to
the moment its stream passes the wait: joins the bench's samples
(<prefix>.bench.<pid>: layout chunks bytes call_ns returned_ns visible_ns
flag_ns, the last the moment the bench's CPU saw the slot released,
written with KVSTASH_TRACE_FILE=<prefix>) with kvstashd's --log-level debug
per-copy lines ("... GPU steps (us): k a-b c c-d; began at <ns> ns"; steady
clock, the same in both processes) and prints, per layout and chunk count,
p50 of: call -> the lane's Copy begins (request path in), Copy begins ->
last kernel ends (GPU timeline, from the lane's start event), last kernel
end -> the engine's stream passes (the slot write reaching the engine).

    python3 bench/probes/engine_join.py <prefix> kvstashd.log
"""
import bisect
import glob
import re
import sys
from collections import defaultdict

LINE = re.compile(r"retrieve of (\d+) chunks, (\d+) bytes: enqueued after \d+ us, GPU began by (\d+) us,"
                  r".* GPU steps \(us\): (.*); began at (\d+) ns")
STEP = re.compile(r"k (-?\d+)-(-?\d+) c (-?\d+)-(-?\d+)")


def p50(v):
    v = sorted(v)
    return v[len(v) // 2] if v else float("nan")


def main(prefix, log):
    copies = []  # (began_ns, bytes, kernel_end_us, copy_start_us)
    for line in open(log, errors="replace"):
        m = LINE.search(line)
        if not m:
            continue
        steps = [tuple(map(int, x)) for x in STEP.findall(m.group(4))]
        if not steps:
            continue
        copies.append((int(m.group(5)), int(m.group(2)), max(s[1] for s in steps),
                       int(m.group(3))))
    copies.sort()
    starts = [c[0] for c in copies]
    rows = defaultdict(lambda: defaultdict(list))
    for path in glob.glob(prefix + ".bench.*"):
        for line in open(path):
            layout, n, nbytes, call, returned, visible, flagged = line.split()
            flagged = int(flagged)
            call, returned, visible, nbytes = int(call), int(returned), int(visible), int(nbytes)
            i = bisect.bisect_left(starts, call)
            match = next((c for c in copies[i:i + 4] if c[0] <= visible and c[1] == nbytes), None)
            if match is None:
                continue
            began, _, kernel_end_us, gpu_began_us = match
            r = rows[(layout, int(n))]
            r["call->return"].append((returned - call) / 1e3)
            r["call->lane Copy"].append((began - call) / 1e3)
            r["Copy->GPU began by"].append(gpu_began_us)
            r["Copy->kernel end"].append(kernel_end_us)
            r["kernel end->CPU sees slot"].append((flagged - began) / 1e3 - kernel_end_us)
            # The GPU's start event ran by gpu_began_us: a lower bound.
            r["GPU-placed end->slot"].append((flagged - began) / 1e3 - gpu_began_us - kernel_end_us)
            r["CPU sees slot->visible"].append((visible - flagged) / 1e3)
            r["kernel end->visible"].append((visible - began) / 1e3 - kernel_end_us)
            r["total"].append((visible - call) / 1e3)
    keys = ["call->return", "call->lane Copy", "Copy->GPU began by", "Copy->kernel end",
            "kernel end->CPU sees slot", "GPU-placed end->slot", "CPU sees slot->visible", "kernel end->visible", "total"]
    print(f"{'layout':22} {'n':>3} {'samples':>7} " + " ".join(f"{k:>26}" for k in keys))
    for (layout, n), r in sorted(rows.items()):
        print(f"{layout:22} {n:3} {len(r['total']):7} " +
              " ".join(f"{p50(r[k]):26.1f}" for k in keys))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
