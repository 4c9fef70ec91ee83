#!/usr/bin/env python3
"""Write the seed corpora of the fuzz targets from workload traces.

usage: make_corpus.py [<workloads-dir> [<out-dir>]]
       (defaults: tests/data/workloads, fuzz/corpus)

Each trace (one length per line) becomes inputs in each target's byte layout
(see the comment at the top of each fuzz/fuzz_<target>.c), with the
configurations the reference plans in golden/ were taken under.  The
committed fuzz/corpus/ was made from the 256- and 1024-sequence traces.
"""
import os
import struct
import sys

# (dp, cp, M, min_cp, vpp group): the golden configurations; dp * cp = ranks
PLAN_CONFIGS = [
    (4, 8, 16384, 1, 4),   # dp_balanced r32 cp8 m16384 vpp4
    (8, 4, 8192, 1, 0),    # dp_balanced r32 cp4 m8192
    (8, 1, 8192, 1, 0),    # dp_balanced r8 cp1 m8192
    (32, 1, 4096, 1, 0),   # dynamic_cp r32 m4096
    (32, 4, 4096, 1, 0),   # dynamic_cp r128 m4096
    (32, 1, 8192, 1, 4),   # dynamic_cp r32 m8192 vpp4
    (8, 1, 2048, 1, 0),    # dynamic_cp r8 m2048
]


def read_trace(path):
    with open(path) as f:
        return [int(line) for line in f if line.strip()]


def plan_input(lengths, dp, cp, m, min_cp, vpp):
    log2_min_cp = min_cp.bit_length() - 1
    header = bytes([dp - 1, cp - 1]) + struct.pack('<H', m - 1)
    header += bytes([log2_min_cp, vpp & 7, 0, 0, 0, 0, 0, 0])
    body = b''.join(struct.pack('<I', s)[:3] for s in lengths if 0 < s < (1 << 23))
    return header + body


def gather_input(lengths):
    """flags byte, int64 total tokens, then cu_seqlens as int32."""
    cu = [0]
    for s in lengths:
        cu.append(cu[-1] + s)
    if cu[-1] >= 2 ** 31:
        return None
    return bytes([0]) + struct.pack('<q', cu[-1]) + b''.join(struct.pack('<i', v) for v in cu)


def config_input(lengths, selectors=b''):
    """22 field selectors (0 = keep the default), then up to 64 lengths as u16 (length - 1)."""
    header = (selectors + bytes(22))[:22]
    return header + b''.join(struct.pack('<H', min(s, 65536) - 1) for s in lengths[:64])


def write(out_dir, target, name, data):
    if data is None:
        return
    path = os.path.join(out_dir, target)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, name), 'wb') as f:
        f.write(data)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    workloads = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, '..', 'tests', 'data', 'workloads')
    out_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, 'corpus')
    if not os.path.isdir(workloads):
        sys.exit(__doc__)
    for trace in sorted(os.listdir(workloads)):
        if not trace.endswith('.txt'):
            continue
        stem = trace[:-4]
        count = int(stem.split('_n')[1].split('_')[0]) if '_n' in stem else 0
        if count not in (256, 1024):
            continue
        lengths = read_trace(os.path.join(workloads, trace))
        configs = PLAN_CONFIGS if count == 256 else PLAN_CONFIGS[:2]
        for dp, cp, m, min_cp, vpp in configs:
            write(out_dir, 'plan', f'{stem}_dp{dp}_cp{cp}_m{m}_vpp{vpp}',
                  plan_input(lengths, dp, cp, m, min_cp, vpp))
        if count == 256:
            write(out_dir, 'gather', stem, gather_input(lengths))
            write(out_dir, 'config', stem, config_input(lengths))
            # DP 8 (selector 3: small value, 8 + 8), scheduler dp_balanced (3, 0 + 8)
            write(out_dir, 'config', stem + '_dp8_dp_balanced',
                  config_input(lengths, bytes([0, 3, 16, 0, 0, 0, 0, 0, 3, 8])))


if __name__ == '__main__':
    main()
