#!/usr/bin/env python3
"""Write programs/default_trace.c: the embedded default trace of `dcpack plan`.

usage: make_default_trace.py TRACE > programs/default_trace.c
TRACE is workloads.py's mlmdefault_n1024_seed1.txt (tests/data/workloads/ holds a copy).
"""
import sys

lengths = [int(line) for line in open(sys.argv[1]) if line.strip()]
print("/*")
print(" * default_trace.c - the trace `dcpack plan` uses without --trace or --generate:")
print(" * workloads.py's mlmdefault family (the reference benchmark's lognormal, mean 1024,")
print(" * sigma 1.5, clipped to [128, 8192]), %d sequences, seed 1 (random.Random(\"mlmdefault/%d/1\"))." % (len(lengths), len(lengths)))
print(" * Written by tests/tools/make_default_trace.py; `dcpack generate mlmdefault:n=%d,seed=1` draws the same."
      % len(lengths))
print(" */")
print('#include "cli.h"')
print()
print("const int32_t dcp_cli_default_lengths[] = {")
for i in range(0, len(lengths), 12):
    print("    " + ", ".join(str(v) for v in lengths[i:i + 12]) + ",")
print("};")
print()
print("const int32_t dcp_cli_default_count = (int32_t)(sizeof dcp_cli_default_lengths / sizeof dcp_cli_default_lengths[0]);")
