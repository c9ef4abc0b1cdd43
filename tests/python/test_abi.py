"""The ctypes binding (kvstash._lib) against kvstash.h itself: every struct's
size and field offsets as the C compiler lays them out, and every enum value
and flag, so that the binding cannot drift from the header unnoticed."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import kvstash
from kvstash import _lib, errors

HEADER = Path(__file__).resolve().parents[2] / "client" / "include" / "kvstash" / "kvstash.h"

# The binding's class of every struct kvstash.h declares.
CLASSES = {
    "kvstash_options": _lib.Options,
    "kvstash_geometry": _lib.CGeometry,
    "kvstash_allocation": _lib.CAllocation,
    "kvstash_layer": _lib.CLayer,
    "kvstash_cuda_layer": _lib.CCudaLayer,
    "kvstash_register_options": _lib.RegisterOptions,
    "kvstash_registration": _lib.CRegistration,
    "kvstash_key": _lib.CKey,
    "kvstash_chunk": _lib.CChunk,
    "kvstash_chunk_outcome": _lib.COutcome,
    "kvstash_lookup_result": _lib.CLookupResult,
    "kvstash_server_info": _lib.CServerInfo,
    "kvstash_board_signal": _lib.CBoardSignal,
}


def _header_text() -> str:
    return re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)


def _header_structs() -> dict:
    """Struct name -> its field names in order, read from kvstash.h."""
    structs = {}
    for name, body in re.findall(r"typedef struct (\w+) \{(.*?)\} \1;", _header_text(), flags=re.S):
        fields = []
        for declaration in body.split(";"):
            found = re.search(r"(\w+)\s*(\[\s*\d+\s*\])?\s*$", declaration.strip())
            if found:
                fields.append(found.group(1))
        structs[name] = fields
    return structs


def _c_layout(structs: dict, tmp_path: Path) -> dict:
    """(size, {field: (offset, size)}) of each struct, from the C compiler."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler to lay out kvstash.h's structs")
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "kvstash/kvstash.h"',
             "int main(void) {"]
    for name, fields in structs.items():
        lines.append(f'  printf("{name} %zu\\n", sizeof({name}));')
        for field in fields:
            lines.append(f'  printf("{name}.{field} %zu %zu\\n", offsetof({name}, {field}), '
                         f"sizeof((({name}*)0)->{field}));")
    lines += ["  return 0;", "}"]
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines) + "\n")
    binary = tmp_path / "layout"
    subprocess.run([compiler, "-I", str(HEADER.parent.parent), str(source), "-o", str(binary)],
                   check=True)
    out = {}
    for line in subprocess.run([str(binary)], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        key, *numbers = line.split()
        if "." in key:
            name, field = key.split(".")
            out[name][1][field] = (int(numbers[0]), int(numbers[1]))
        else:
            out[key] = (int(numbers[0]), {})
    return out


def test_every_struct_matches_the_header(tmp_path):
    structs = _header_structs()
    assert set(structs) == set(CLASSES), "a struct of kvstash.h has no ctypes class, or one went"
    layout = _c_layout(structs, tmp_path)
    for name, cls in CLASSES.items():
        size, fields = layout[name]
        assert [f[0] for f in cls._fields_] == structs[name], f"{name}: fields differ"
        assert ctypes.sizeof(cls) == size, f"{name}: ctypes size {ctypes.sizeof(cls)}, C {size}"
        for field, (offset, field_size) in fields.items():
            descriptor = getattr(cls, field)
            assert (descriptor.offset, descriptor.size) == (offset, field_size), \
                f"{name}.{field}: ctypes (offset, size) {(descriptor.offset, descriptor.size)}, " \
                f"C {(offset, field_size)}"


def _header_values() -> dict:
    text = _header_text()
    values = {k: int(v) for k, v in re.findall(r"\b(KVSTASH_\w+) = (\d+)", text)}
    for k, v in re.findall(r"#define (KVSTASH_\w+) (0x[0-9A-Fa-f]+|\d+)u?\b", text):
        values[k] = int(v, 0)
    return values


def test_every_enum_value_matches_the_header():
    values = _header_values()
    checked = set()

    def same(c_name: str, python_value: int) -> None:
        assert values[c_name] == python_value, f"{c_name}: header {values[c_name]}, Python {python_value}"
        checked.add(c_name)

    for dtype in kvstash.DType:
        same(f"KVSTASH_DTYPE_{dtype.name}", dtype.value)
    for result in kvstash.ChunkResult:
        same(f"KVSTASH_CHUNK_{result.name}", result.value)
    for code, cls in errors._BY_CODE.items():
        same("KVSTASH_" + re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).upper(), code)
    same("KVSTASH_ALLOCATION_SHM", _lib.ALLOCATION_SHM)
    same("KVSTASH_ALLOCATION_CUDA_IPC", _lib.ALLOCATION_CUDA_IPC)
    same("KVSTASH_ALLOCATION_PEER_FD", _lib.ALLOCATION_PEER_FD)
    same("KVSTASH_LOOKUP_PREFETCH", _lib.LOOKUP_PREFETCH)
    same("KVSTASH_ABI_VERSION", _lib.ABI_VERSION)
    same("KVSTASH_OK", 0)
    # The limits Python reads from the library, never restates.
    same("KVSTASH_MAX_BOARD_SLOTS", kvstash.max_board_slots())
    same("KVSTASH_MAX_LAYER_RANGES", kvstash.max_layer_ranges())
    # Limits and spin settings the binding does not restate need no twin.
    unchecked = set(values) - checked - {"KVSTASH_NEVER_SPIN"}
    assert not unchecked, f"kvstash.h values with no Python twin checked here: {sorted(unchecked)}"


def test_the_loaded_library_speaks_this_abi():
    assert _lib.lib().kvstash_abi_version() == _lib.ABI_VERSION


@pytest.mark.parametrize("num_layers", [1, 2, 7, 61, 80, 255, 256, 300, 1000])
def test_layer_ranges_partition_the_layers_as_the_library_splits_them(num_layers):
    # A retrieve signals at most one range per layer.
    for ranges in sorted({min(num_layers, r) for r in (1, 2, 3, 7, kvstash.max_layer_ranges())}):
        begins = [kvstash.layer_range_begin(num_layers, ranges, k) for k in range(ranges + 1)]
        assert begins[0] == 0 and begins[-1] == num_layers
        # Every range holds at least one layer, in registration order.
        assert all(a < b for a, b in zip(begins, begins[1:])), (num_layers, ranges, begins)
        # floor(k * L / R): the split docs/protocol.md states.
        assert begins == [k * num_layers // ranges for k in range(ranges + 1)]
    assert kvstash.layer_range_begin(num_layers, 0, 0) == 0  # no ranges: nothing to split
