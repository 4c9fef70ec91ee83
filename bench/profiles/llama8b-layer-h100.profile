# dcpack cost profile, calibrated by python -m dcpack.calibrate on 2026-12-07
# machine: 1x NVIDIA H100 80GB HBM3, 1 rank(s); torch 2.11.0+cu130
# model: layers 1, hidden 4096, heads 32, kv heads 8, ffn 14336, vocab 1024, bfloat16, attention varlen
# grid: CP sizes [1] measured, [2, 4, 8, 16, 32, 64] emulated; tokens per rank [256, 512, 1024, 2048, 4096, 8192, 16384, 32768] (emulated: [1024, 2048, 4096, 8192, 16384]); 122 microbatches; median of 5 after 2 warm-up runs of every shape
# form: gather (cp_gather.<cp> undivided per token, kv 0); small-microbatch knee 1536 chosen from [0, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192] by residual
# fit: relative error median 1.87%, p90 6.99%, worst 70.09%; margin_ppm = the p90
# error at CP 1: median 1.88%, p90 5.25%, worst 47.99% (41 microbatches)
# error at CP 2: median 1.63%, p90 6.67%, worst 11.56% (15 microbatches)
# error at CP 4: median 2.08%, p90 3.46%, worst 70.09% (15 microbatches)
# error at CP 8: median 1.12%, p90 2.43%, worst 15.41% (15 microbatches)
# error at CP 16: median 1.07%, p90 7.79%, worst 10.81% (15 microbatches)
# error at CP 32: median 2.17%, p90 3.85%, worst 5.37% (12 microbatches)
# error at CP 64: median 4.46%, p90 8.48%, worst 11.35% (9 microbatches)
# error at tokens/rank < 1K: median 2.19%, p90 7.46%, worst 8.94% (7 microbatches)
# error at tokens/rank 1K-4K: median 3.18%, p90 11.08%, worst 70.09% (46 microbatches)
# error at tokens/rank 4K-16K: median 1.49%, p90 2.93%, worst 7.05% (45 microbatches)
# error at tokens/rank >= 16K: median 0.97%, p90 2.84%, worst 3.12% (24 microbatches)
# units: picoseconds (time_unit_ps = 1): quadratic per token pair, linear per token
# CP [2, 4, 8, 16, 32, 64]: compute measured on this GPU with dcpack.thd.LOCAL_REPLAY (the rank's share on the group's shapes), collectives NOT measured here: priced by the ring model (cp-1) x (alpha + beta x bytes per rank) fitted to bench/data/comm_2xh200.json, alpha 119.16 us, beta 8.163 ps/byte
# CP 128..65536: not timed; the CP term extrapolated as a + b (cp-1)/cp from the fitted sizes [2, 4, 8, 16, 32, 64]
time_unit_ps = 1
quadratic = 87
linear = 3066931
round_latency = 11606005
microbatch_overhead = 1290765544
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
cp_gather.2 = 54860
cp_gather.4 = 128525
cp_gather.8 = 111655
cp_gather.16 = 124151
cp_gather.32 = 140864
cp_gather.64 = 156526
cp_gather.128 = 142868
cp_gather.256 = 143430
cp_gather.512 = 143711
cp_gather.1024 = 143852
cp_gather.2048 = 143922
cp_gather.4096 = 143957
cp_gather.8192 = 143975
cp_gather.16384 = 143984
cp_gather.32768 = 143988
cp_gather.65536 = 143990
small_knee = 1536
small_slope = 3257779
margin_ppm = 69921
pipeline_schedule = 1f1b
forward_ppm = 333333
first_stage_per_token = 0
last_stage_per_token = 0
