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
    """25 field selectors (0 = keep the default), then up to 64 lengths as u16 (length - 1)."""
    header = (selectors + bytes(25))[:25]
    return header + b''.join(struct.pack('<H', min(s, 65536) - 1) for s in lengths[:64])


# (log2 cp, flags, alignment, target, capacity): flags as in fuzz_thd.c
THD_CONFIGS = [
    (0, 0b0000_0000, 0, 0, 0),       # cp 1, no padding
    (1, 0b0001_0100, 8, 0, 0),       # cp 2 zigzag, spans of 2*cp, alignment 8, append_dummy
    (2, 0b0001_1010, 0, 8192, 0),    # cp 4 zigzag, spans of 2*cp, target 8192, extend_last
    (1, 0b0000_0101, 64, 0, 0),      # cp 2 contiguous, alignment 64
    (3, 0b0000_1001, 0, 4096, 17),   # cp 8 contiguous, target 4096, fixed capacity 16 (+ dummy)
]


def thd_input(lengths, log2_cp, flags, alignment, target, capacity):
    unit = 2 << log2_cp if flags & 0x10 else 1
    body = b''
    for i, s in enumerate(lengths[:16]):
        pv = min((s + unit - 1) // unit, 0xFFFE)
        body += struct.pack('<H', pv) + bytes([254 if i % 3 else 200])
    return bytes([log2_cp, 0, flags]) + struct.pack('<HH', alignment, target) + bytes([capacity]) + body


def step_input(lengths, config, prepacked):
    """fuzz_step: config bytes, then samples (first 12 sequences; pre-packed ones hold 3 each)."""
    b0, b1, m, max_tokens = config
    head = bytes([b0, b1]) + struct.pack('<HH', m - 1, max_tokens) + bytes([63])
    body = b''
    seqs = [min(s, 2000) for s in lengths[:12]]
    if prepacked:
        for i in range(0, len(seqs), 3):
            cu = [0]
            for s in seqs[i:i + 3]:
                cu.append(cu[-1] + s)
            body += bytes([1]) + struct.pack('<hhh', cu[-1], 0, 0) + bytes([len(cu)])
            body += b''.join(struct.pack('<h', v) for v in cu)
    else:
        for i, s in enumerate(seqs):
            body += bytes([0]) + struct.pack('<hhh', s, s, s - (i % 4) * (s // 8)) + bytes([0])
    return head + body


# fuzz_pack layouts: (byte 0, byte 1, M, alignment, byte 5)
PACK_CONFIGS = [
    (0x05, 0x00, 4096, 0, 0x00),   # DP 2 x CP 2, dp_balanced, zigzag, no padding
    (0x87, 0x11, 2048, 63, 0x00),  # DP 4 x CP 2 pre-packed, dynamic_cp, alignment 64
    (0x7D, 0x2E, 4096, 0, 0x04),   # DP 2 x CP 4, TP 2, PP 2 + VPP, contiguous, extend_last, pad to M, cap 4
    (0x01, 0x00, 4096, 0, 0x10),   # DP 2, cu_seqlens decreasing planted on one rank
]


def pack_input(lengths, b0, b1, m, alignment, b5):
    return bytes([b0, b1]) + struct.pack('<H', m - 1) + bytes([alignment, b5, 1]) + \
        b''.join(struct.pack('<H', min(s, m - 64) - 1) for s in lengths[:24])


def comm_inputs():
    """fuzz_comm: 4 ranks; every operation clean, then each anomaly on each operation."""
    clean = bytes([2]) + b''.join(bytes([op, 1, 17 + op, 0b0101]) for op in range(5))
    yield 'clean', clean
    for anomaly in range(1, 6):
        ops = b''.join(bytes([op | anomaly << 3, op % 4, 9 + op, 0b0110]) for op in range(5) if anomaly != 3 or op == 1)
        yield f'anomaly{anomaly}', bytes([2]) + ops + bytes([4, 0, 5, 0])


def trace_inputs(lengths):
    """fuzz_trace: a mode byte (0 auto, 1 text, 2 csv, 3 jsonl, 4 auto with --column len), then the file."""
    text = ''.join(f'{s}\n' for s in lengths[:32])
    yield 'text', b'\x01' + text.encode()
    yield 'auto', b'\x00' + text.encode()
    csv = 'id,len, note\n' + ''.join(f'{i}, {s} ,x\n' for i, s in enumerate(lengths[:32]))
    yield 'csv', b'\x02' + csv.encode()
    yield 'csv_quoted', b'\x02' + b'"id","len"\n"0","12"\n"1",""7""\n'
    jsonl = ''.join(f'{{"id": {i}, "len": {s}, "meta": [1, {{"a": "b\\"c"}}]}}\n' for i, s in enumerate(lengths[:16]))
    yield 'jsonl', b'\x03' + jsonl.encode()
    # fields near the reader's 127-character limit, zero-padded
    yield 'csv_long_field', b'\x02' + b'len\n' + b'0' * 122 + b'12345\n7\n'
    yield 'text_long_line', b'\x01' + b'0' * 300 + b'42\n'


def plan_ahead_input(lengths, scheduler, ranks, log2_m, change, i=0, j=0):
    """scheduler | effort/model bits, ranks - 1, log2(M / 256), change, i, j, then lengths - 1 as u16."""
    header = bytes([scheduler, ranks - 1, log2_m, change]) + struct.pack('<HH', i, j)
    return header + b''.join(struct.pack('<H', s - 1) for s in lengths if 0 < s <= 65536)


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
    for name, data in comm_inputs():
        write(out_dir, 'comm', name, data)
    trace_lengths = read_trace(os.path.join(workloads, 'mlmdefault_n256_seed1.txt'))
    for name, data in trace_inputs(trace_lengths):
        write(out_dir, 'trace', name, data)
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
            # every change once: dynamic_cp, balanced (fast: bit 2), dp_balanced; 32 ranks of M 4096 (dp_balanced:
            # M 16384, so that its static CP group of 2 holds every length)
            for change in range(9):
                for scheduler in (1, 2 | 4, 0):
                    write(out_dir, 'plan_ahead', f'{stem}_s{scheduler}_c{change}',
                          plan_ahead_input(lengths[:128], scheduler, 32, 6 if scheduler == 0 else 4, change, 7, 300))
            write(out_dir, 'gather', stem, gather_input(lengths))
            write(out_dir, 'config', stem, config_input(lengths))
            # dp_balanced no padding; dynamic_cp alignment 8 (v = 4); pad to M with extend_last; cap 4
            for j, config in enumerate([(0x00, 0xF0, 8192, 60000), (0x41, 0xF0, 4096, 60000),
                                        (0x06, 0xF4, 8192, 60000)]):
                write(out_dir, 'step', f'{stem}_{j}', step_input(lengths, config, False))
                write(out_dir, 'step', f'{stem}_{j}_prepacked', step_input(lengths, config, True))
            for i, config in enumerate(PACK_CONFIGS):
                write(out_dir, 'pack', f'{stem}_{i}', pack_input(lengths, *config))
            for i, (log2_cp, flags, alignment, target, capacity) in enumerate(THD_CONFIGS):
                write(out_dir, 'thd', f'{stem}_{i}', thd_input(lengths, log2_cp, flags, alignment, target, capacity))
            # DP 8 (selector 3: small value, 8 + 8), scheduler dp_balanced (3, 0 + 8)
            write(out_dir, 'config', stem + '_dp8_dp_balanced',
                  config_input(lengths, bytes([0, 3, 16, 0, 0, 0, 0, 0, 3, 8])))


if __name__ == '__main__':
    main()
