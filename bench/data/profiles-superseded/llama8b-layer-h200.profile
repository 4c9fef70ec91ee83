# dcpack cost profile, calibrated by python -m dcpack.calibrate on 2026-11-28
# machine: 1x NVIDIA H200, 1 rank(s); torch 2.11.0+cu130
# model: layers 1, hidden 4096, heads 32, kv heads 8, ffn 14336, vocab 1024, bfloat16, attention varlen
# grid: CP sizes [1], tokens per rank [4096, 8192, 16384, 32768], 20 microbatches; median of 5 after 2 warm-up
# fit: relative error median 0.83%, worst 2.81%
# units: picoseconds (time_unit_ps = 1): quadratic per token pair, linear per token
# kv and round_latency: not measured (CP 1 only), 0
time_unit_ps = 1
quadratic = 88
linear = 2949879
round_latency = 0
microbatch_overhead = 1133951500
kv.2 = 0
kv.4 = 0
kv.8 = 0
kv.16 = 0
kv.32 = 0
kv.64 = 0
kv.128 = 0
kv.256 = 0
kv.512 = 0
kv.1024 = 0
kv.2048 = 0
kv.4096 = 0
kv.8192 = 0
kv.16384 = 0
kv.32768 = 0
kv.65536 = 0
step_model = barrier
