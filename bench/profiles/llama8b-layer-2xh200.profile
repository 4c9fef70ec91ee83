# re-fitted on 2026-12-07 by bench/refit_profile.py from the samples of bench/profiles/llama8b-layer-2xh200.json (not re-timed); the original header:
#   dcpack cost profile, calibrated by python -m dcpack.calibrate on 2026-11-28
#   machine: 2x NVIDIA H200, 2 rank(s); torch 2.11.0+cu130
#   model: layers 1, hidden 4096, heads 32, kv heads 8, ffn 14336, vocab 1024, bfloat16, attention varlen
#   grid: CP sizes [1, 2], tokens per rank [4096, 8192, 16384, 32768], 40 microbatches; median of 5 after 2 warm-up
# form: gather (cp_gather.<cp> undivided per token, kv 0); knees tried [0, 512, 1024, 1536, 2048, 3072, 4096] (none above the smallest measured 4096 tokens per rank); chosen 0: no hinge fitted (no microbatch small enough to place one)
# fit: relative error median 0.74%, p90 2.16%, worst 3.38%; margin_ppm = the p90
# error at CP 1: median 0.54%, p90 2.00%, worst 3.38% (20 microbatches)
# error at CP 2: median 0.98%, p90 2.16%, worst 2.43% (20 microbatches)
# error at tokens/rank 4K-16K: median 1.02%, p90 2.46%, worst 3.38% (20 microbatches)
# error at tokens/rank >= 16K: median 0.54%, p90 1.38%, worst 2.16% (20 microbatches)
# CP sizes measured: [1, 2]; CP 4..65536: not measured, cp_gather extrapolated from the measured sizes as a ring share (cp-1)/cp
# units: picoseconds (time_unit_ps = 1)
time_unit_ps = 1
quadratic = 90
linear = 2948669
round_latency = 0
microbatch_overhead = 1057979153
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
step_model = dependency
cp_gather.2 = 106365
cp_gather.4 = 159547
cp_gather.8 = 186138
cp_gather.16 = 199434
cp_gather.32 = 206081
cp_gather.64 = 209405
cp_gather.128 = 211067
cp_gather.256 = 211898
cp_gather.512 = 212314
cp_gather.1024 = 212521
cp_gather.2048 = 212625
cp_gather.4096 = 212677
cp_gather.8192 = 212703
cp_gather.16384 = 212716
cp_gather.32768 = 212723
cp_gather.65536 = 212726
small_knee = 0
small_slope = 0
margin_ppm = 21568
