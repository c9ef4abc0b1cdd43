#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then what an engine's build does
# with it: a C and a C++ program built through pkg-config and through
# find_package(kvstash), each pinging a kvstashd started from the installed
# tree. Also checks that only public headers were installed and that the
# systemd unit passes systemd-analyze where it is available.
#
# usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source_dir=$2
work=$(mktemp -d /tmp/kvstash-install-test-XXXXXX)
daemon=
cleanup() {
  [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
# The consumers build like an engine's would: no ccache from the caller.
unset CMAKE_C_COMPILER_LAUNCHER CMAKE_CXX_COMPILER_LAUNCHER CMAKE_CUDA_COMPILER_LAUNCHER
prefix=$work/prefix

echo "== cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"

echo "== installed files"
for f in bin/kvstashd bin/kvstash etc/kvstash/kvstash.conf.example \
         lib/systemd/system/kvstashd.service lib/sysusers.d/kvstash.conf; do
  [ -e "$prefix/$f" ] || { echo "missing $f"; exit 1; }
done
libdir=$(dirname "$(find "$prefix" -name 'libkvstash.a' | head -1)")
[ -f "$libdir/libkvstash.a" ] || { echo "missing libkvstash.a"; exit 1; }
ls "$libdir"/libkvstash.so* >/dev/null || { echo "missing libkvstash.so"; exit 1; }
[ -f "$libdir/pkgconfig/kvstash.pc" ] && [ -f "$libdir/pkgconfig/kvstash-static.pc" ] ||
  { echo "missing pkg-config files"; exit 1; }
[ -f "$libdir/cmake/kvstash/kvstashConfig.cmake" ] || { echo "missing kvstashConfig.cmake"; exit 1; }

# Exactly the public headers: client/include, vocab/include and
# runtime/include (and the headers the build generates for vocab), nothing
# from src/.
expected=$({ (cd "$source_dir/client/include" && find kvstash -name '*.h');
              (cd "$source_dir/vocab/include" && find kvstash -name '*.h');
              (cd "$source_dir/runtime/include" && find kvstash -name '*.h');
              (cd "$build/vocab/include" && find kvstash -name '*.h'); } | sort -u)
installed=$(cd "$prefix/include" && find . -type f | sed 's|^\./||' | sort)
if [ "$expected" != "$installed" ]; then
  echo "installed headers differ from the public ones:"
  diff <(echo "$expected") <(echo "$installed") || true
  exit 1
fi
# And none of them reaches for what an engine does not have.
if grep -rlE '#include [<"](zmq|flatbuffers|cuda|spdlog|CLI|nlohmann)' "$prefix"/include/kvstash; then
  echo "an installed header includes a dependency of kvstash's own"
  exit 1
fi

if command -v systemd-analyze >/dev/null; then
  echo "== systemd-analyze verify kvstashd.service"
  # verify resolves ExecStart; run it on a copy that points at the prefix.
  systemd-analyze verify "$prefix/lib/systemd/system/kvstashd.service" 2>&1 |
    grep -v -e 'kvstash.*not found' -e "Failed to resolve user" -e "Unit .* not found" \
            -e "is not executable" -e "Command .* is not executable" || true
  if systemd-analyze verify "$prefix/lib/systemd/system/kvstashd.service" 2>&1 |
      grep -E "Unknown (key|section)|Invalid|Failed to parse"; then
    echo "kvstashd.service has errors"
    exit 1
  fi
fi

echo "== kvstashd from the installed tree"
socket="ipc://$work/kvstash.sock"
"$prefix/bin/kvstashd" --socket "$socket" --backend host --l1-gb 0.0625 --l1-slice-mb 4 \
  >"$work/kvstashd.log" 2>&1 &
daemon=$!
for _ in $(seq 100); do
  "$prefix/bin/kvstash" --socket "$socket" ping >/dev/null 2>&1 && break
  sleep 0.1
done
"$prefix/bin/kvstash" --socket "$socket" ping

echo "== pkg-config"
export PKG_CONFIG_PATH=$libdir/pkgconfig
cc -std=c11 -Wall -Werror "$source_dir/tests/install/consumer/consumer.c" \
  $(pkg-config --cflags --libs kvstash) -Wl,-rpath,"$libdir" -o "$work/c_pkgconfig"
"$work/c_pkgconfig" "$socket"
c++ -std=c++17 -Wall -Werror "$source_dir/tests/install/consumer/consumer.cc" \
  $(pkg-config --cflags --libs kvstash-static) -o "$work/cc_pkgconfig"
"$work/cc_pkgconfig" "$socket"

echo "== find_package(kvstash)"
cmake -S "$source_dir/tests/install/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$work/consumer-configure.log" ||
  { cat "$work/consumer-configure.log"; exit 1; }
cmake --build "$work/consumer" -j 2 >"$work/consumer-build.log" ||
  { cat "$work/consumer-build.log"; exit 1; }
"$work/consumer/c_consumer" "$socket"
"$work/consumer/cc_consumer" "$socket"
"$work/consumer/c_static_consumer" "$socket"
echo "install test passed"
