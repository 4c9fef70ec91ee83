#!/usr/bin/env python3
"""readme_numbers.py - every measured number the README quotes is one docs/benchmarks.md states.

docs/benchmarks.md is the one source of the project's numbers; the README quotes headlines from it.
A number with a unit of time, a percentage or a speed-up ("0.54 ms", "8.25%", "31 times") in the
README must appear, written the same way, in docs/benchmarks.md.
usage: readme_numbers.py <source-dir>
"""
import re
import sys
from pathlib import Path

src = Path(sys.argv[1])
readme = (src / "README.md").read_text()
bench = (src / "docs" / "benchmarks.md").read_text()
# drop code blocks: their numbers are inputs, not measurements
readme = re.sub(r"```.*?```", "", readme, flags=re.S)
readme = "\n".join(line for line in readme.splitlines() if not line.startswith("    "))
UNIT = r"(?:ms|us|µs|s|%|x|times)"
number = re.compile(r"(?<![\w.,])(\d[\d,]*(?:\.\d+)?)(?: to (\d[\d,]*(?:\.\d+)?))?\s?(" + UNIT + r")(?![\w])")
bench_flat = re.sub(r"\s+", " ", bench)
missing = []
for m in number.finditer(readme):
    for value in (m.group(1), m.group(2)):
        if value is None:
            continue
        unit = m.group(3)
        # the value with its unit, or as the first end of a range ("0.46 to 0.53 ms"), or a table cell
        pattern = (r"(?<![\d.,])" + re.escape(value) + r"(?:\s?" + re.escape(unit) + r"(?![\w])| to | ?-|\s*\|)")
        if re.search(pattern, bench_flat) is None:
            line = readme.count("\n", 0, m.start()) + 1
            missing.append(f"README.md (code blocks removed) line {line}: {m.group(0)!r}: {value} not in docs/benchmarks.md")
if missing:
    print("\n".join(missing))
    sys.exit(1)
print("readme_numbers: ok")
