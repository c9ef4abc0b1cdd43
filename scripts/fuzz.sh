#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS]: builds the request fuzzer (clang 14, ASan +
# UBSan + libFuzzer, ccache when present) in its own folder, replays the
# checked-in regression corpus (tests/fuzz/regression: every crash the
# fuzzer found so far), then fuzzes from generated seeds for SECONDS (default
# 60), then runs the shared-memory ring fuzzer and the tier fuzzer (chunk
# headers, Redis replies) briefly from their seeds in tests/fuzz/tier_seeds. Exits
# non-zero on any crash, leak, UB report or timeout; crash inputs land in
# ${KVSTASH_FUZZ_DIR}/artifacts.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
build_dir=${KVSTASH_FUZZ_BUILD_DIR:-build-fuzz}
work_dir=${KVSTASH_FUZZ_DIR:-$build_dir/fuzz-run}
cc=${KVSTASH_FUZZ_CC:-clang-14}
cxx=${KVSTASH_FUZZ_CXX:-clang++-14}
command -v "$cxx" >/dev/null || { echo "fuzz: $cxx not found (apt-get install clang-14 libclang-rt-14-dev)" >&2; exit 1; }
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

start=$(date +%s)
# -O1 with line tables: builds fast (CI budget), symbolizes stacks, keeps asserts.
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DKVSTASH_WITH_CUDA=OFF -DKVSTASH_BUILD_TESTS=OFF -DKVSTASH_BUILD_BENCH=OFF -DKVSTASH_BUILD_FUZZERS=ON \
  "${launcher[@]}" >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target kvstash_request_fuzzer kvstash_fuzz_seeds \
  kvstash_ring_fuzzer kvstash_tier_fuzzer
built=$(date +%s)
echo "fuzz: built in $((built - start)) s"

fuzzer=$build_dir/bin/kvstash_request_fuzzer
rm -rf "$work_dir"
mkdir -p "$work_dir/seeds" "$work_dir/corpus" "$work_dir/artifacts"
"$build_dir/bin/kvstash_fuzz_seeds" "$work_dir/seeds"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Every regression input, and every seed, must run clean.
"$fuzzer" -runs=0 -timeout=10 -artifact_prefix="$work_dir/artifacts/" \
  tests/fuzz/regression "$work_dir/seeds"
echo "fuzz: regression corpus and seeds ran clean"

# Then fuzz. -print_final_stats reports executions per second and in total.
"$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
  -print_final_stats=1 -artifact_prefix="$work_dir/artifacts/" \
  "$work_dir/corpus" "$work_dir/seeds" tests/fuzz/regression 2>&1 | tee "$work_dir/fuzz.log" | grep -E "^#|stat::|ERROR|SUMMARY|Done" | tail -n 40
status=${PIPESTATUS[0]}
# The shared-memory channel's ring reader: small and fast, a few seconds.
mkdir -p "$work_dir/ring-corpus"
set +e
"$build_dir/bin/kvstash_ring_fuzzer" -max_total_time=10 -max_len=4200 \
  -artifact_prefix="$work_dir/artifacts/ring-" "$work_dir/ring-corpus" 2>&1 | grep -E "ERROR|SUMMARY|Done"
ring_status=${PIPESTATUS[0]}
# The tiers' header decoder and Redis reply reader: as briefly, from the
# checked-in seeds (replies Redis sends, and ones it never would).
mkdir -p "$work_dir/tier-corpus"
"$build_dir/bin/kvstash_tier_fuzzer" -max_total_time=10 -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 -artifact_prefix="$work_dir/artifacts/tier-" \
  "$work_dir/tier-corpus" tests/fuzz/tier_seeds 2>&1 | grep -E "ERROR|SUMMARY|Done"
tier_status=${PIPESTATUS[0]}
set -e
[[ $status -eq 0 ]] && status=$ring_status
[[ $status -eq 0 ]] && status=$tier_status
end=$(date +%s)
echo "fuzz: $((end - start)) s in all (build $((built - start)) s)"
exit "$status"
