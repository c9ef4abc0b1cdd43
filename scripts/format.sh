#!/usr/bin/env bash
# scripts/format.sh [--check] [FILE...]: formats the tracked C, C++ and CUDA
# sources with .clang-format (clang-format-14, or $CLANG_FORMAT), in place.
# --check changes nothing: it lists the files that differ and exits 1 if any.
set -euo pipefail
cd "$(dirname "$0")/.."
clang_format=${CLANG_FORMAT:-clang-format-14}
command -v "$clang_format" >/dev/null ||
  { echo "format: $clang_format not found (apt-get install clang-format-14)" >&2; exit 2; }
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.c' '*.cc' '*.h' '*.cu' '*.cuh')
fi
if [ "$check" = 0 ]; then
  "$clang_format" -i "${files[@]}"
  exit 0
fi
differ=0
for f in "${files[@]}"; do
  if ! "$clang_format" "$f" | cmp -s - "$f"; then
    echo "$f"
    differ=$((differ + 1))
  fi
done
if [ "$differ" -gt 0 ]; then
  echo "format: $differ of ${#files[@]} files differ from .clang-format (scripts/format.sh fixes them)" >&2
  exit 1
fi
echo "format: ${#files[@]} files follow .clang-format"
