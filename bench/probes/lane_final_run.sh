#!/usr/bin/env bash
# The fifth session's last GPU run (bench/RESULTS.md): the gpu tests, the
# lane profiles in both modes, then the lead's bench in both modes. Run from
# the repository root on the GPU machine with binaries packed into
# .device-lane (scripts as in bench/probes) and KVSTASH_BIN_DIR set;
# everything lands in /tmp/o and, tarred, under $OUT.
B=$KVSTASH_BIN_DIR; O=/tmp/o; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader; date -u
for t in chunk_copy_gpu_test:60 cuda_lane_gpu_test:120 gpu_test:240 backend_selection_test:40; do n=${t%:*}; timeout ${t#*:} $B/$n --gtest_brief=1 > $O/$n.log 2>&1; echo "== $n rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]" $O/$n.log | head -20; grep -B3 -A10 "Failure" $O/$n.log | head -40; done
for m in dma direct; do echo "=== profile $m"; SAMPLES=60 bash .device-lane/lane_profile.sh $O/$m $m > $O/profile-$m.txt 2>&1; cat $O/$m/engine-$m.txt; grep -E "^error|FAIL" $O/$m/bench-$m.txt; done
for m in dma direct; do
  S=ipc:///tmp/kvstash-final-$m.sock
  $B/kvstashd --backend cuda --l1-gb 32 --transfer-mode $m --socket $S > $O/kvstashd-final-$m.log 2>&1 & d=$!
  for _ in $(seq 100); do $B/kvstash ping --socket $S >/dev/null 2>&1 && break; sleep 0.1; done
  timeout 240 $B/kvstash bench --backend cuda --socket $S --timeout-ms 60000 --chunk-counts 1,4,16 --latency-samples 300 > $O/bench-final-$m.txt 2>&1; echo "bench $m rc=$?"
  kill $d; wait $d
done
tar czf $OUT/final.tgz -C /tmp o
