#!/usr/bin/env python3
"""Prints why each skipped test skipped, from ctest's log of its last run.

ctest shows a skipped test as "***Skipped" (tests/CMakeLists.txt marks
GoogleTest's "[  SKIPPED ]" as a skip) but keeps the reason in
Testing/Temporary/LastTest.log; scripts/test.sh calls this after ctest so the
reasons are on screen.

usage: ctest_skip_reasons.py BUILD_DIR
"""
import pathlib
import re
import sys


def skip_reasons(log_text):
    """Yields (test name, reason) for every test whose output has a skip."""
    # Each test's block: "N/M Test: NAME" ... "Output:" ... "<end of output>".
    for block in re.finditer(r"^\d+/\d+ Test: ([^\n]+)\n(.*?)^<end of output>", log_text,
                             re.S | re.M):
        name, body = block.group(1), block.group(2)
        # Our scripts print "SKIPPED: REASON" and exit 77 (SKIP_RETURN_CODE).
        script = re.search(r"^SKIPPED: (.*)$", body, re.M)
        if "[  SKIPPED ]" not in body and not script:
            continue
        # GoogleTest: "file:line: Skipped\nREASON\n" before "[  SKIPPED ] ...".
        found = re.search(r": Skipped\n(.*?)\n(?:\n|\[  SKIPPED \])", body, re.S)
        reason = (script or found).group(1).strip() if (script or found) else "(no reason given)"
        yield name, " ".join(reason.split())


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    log = pathlib.Path(sys.argv[1]) / "Testing" / "Temporary" / "LastTest.log"
    if not log.exists():
        return
    by_reason = {}
    for name, reason in sorted(set(skip_reasons(log.read_text(errors="replace")))):
        by_reason.setdefault(reason, []).append(name.split("  #")[0])
    if not by_reason:
        return
    total = sum(len(names) for names in by_reason.values())
    print(f"\n{total} test(s) skipped, and why:")
    for reason, names in by_reason.items():
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        print(f"  {reason}\n    ({shown})")


if __name__ == "__main__":
    main()
