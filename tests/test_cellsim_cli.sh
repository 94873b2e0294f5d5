#!/usr/bin/env bash
# test_cellsim_cli.sh - `moontail bench --layer-times` and `cellsim` end to end:
#   - on a synthetic deepseek2 model (2 MoE layers, 8 experts, 2 per token), the
#     matrix products of a decode step of one session read each layer's
#     non-expert matrices and exactly 2 experts (as the file's tensor sizes
#     say), more sessions touch more experts but never more than 8, every time
#     is positive;
#   - cellsim takes that calibration, finds the layer bytes equal to the file's,
#     and simulates the model as a pipeline (every requester finishes) and Kimi
#     K3 as a placed cell (with a failure: no request short);
#   - the same for a kimi-k3 model (a KDA and an MLA layer, residual
#     checkpoints, latent MXFP4 experts): the bench names what cellsim needs
#     (types, MLA layers, block, latent) and reads exactly 2 experts per layer
#     for one token; cellsim's layer bytes are the file's; `cellsim --hops`
#     lists K3's stages with the widths they are sent and send back;
#   - bad inputs are refused with a message naming them: batch lists, missing
#     or malformed calibrations, another architecture, stages that do not add
#     up, a failure without a second pipeline, machines too small, unknown
#     options.
set -u
. "$(dirname "$0")/lib/harness.bash"
CELLSIM=${MT_BUILD:?MT_BUILD must point at the build directory}/cellsim
T="timeout 120"
cd "$tmp" || exit 1

$T "$BIN" mkmodel -o m.gguf --arch deepseek2 --type q8_0 --layers 2 --embd 256 --heads 4 \
    --q-lora 64 --kv-lora 64 --nope 32 --rope 32 --v-dim 32 --experts 8 --experts-used 2 \
    --ff-exp 128 --shared-experts 1 --dense-layers 0 --groups 1 --groups-used 1 && ok || bad "mkmodel"
$T "$BIN" bench -m m.gguf --layer-times -t 1 --batches 1,2,4,16 --prefills 8 -p 8 -r 2 --json \
    >cal.json 2>cal.err && ok || bad "bench --layer-times: $(cat cal.err)"
json '
const d = o.decode, one = d[0];
const want = o.attn_matmul_bytes + 2 * o.expert_bytes; /* products read matrices, not norms */
if (!(o.attn_matmul_bytes > 0.9 * o.attn_bytes && o.attn_matmul_bytes < o.attn_bytes)) process.exit(1);
if (o.n_layer != 2 || o.n_moe_layer != 2 || o.n_expert != 8 || o.n_expert_used != 2) process.exit(1);
if (Math.abs(one.bytes_per_layer - want) > 0.5) { console.error("batch 1 read", one.bytes_per_layer, "want", want); process.exit(1); }
if (Math.abs(one.experts - 2) > 1e-6) process.exit(1);
for (let i = 1; i < d.length; i++)
    if (d[i].experts < d[i - 1].experts - 1e-6 || d[i].experts > 8 + 1e-6) process.exit(1);
for (const p of [...d, ...o.prefill])
    if (!(p.ms_per_layer > 0 && p.ms_min > 0 && p.ms_min <= p.ms_per_layer && p.cpu_ms_per_layer > 0)) process.exit(1);
if (o.prefill.length != 1 || o.prefill[0].batch != 8 || !(o.head_ms > 0)) process.exit(1);
' <cal.json && ok || bad "layer times do not add up: $(head -c 600 cal.json)"
# the table form names the columns
expect 0 "experts/layer" "$BIN" bench -m m.gguf --layer-times -t 1 --batches 1 -p 4 -r 1

# ---- bad bench inputs
for b in 0 1,x "" 1,,2 5000; do
    expect 2 "batches" "$BIN" bench -m m.gguf --layer-times --batches "$b"
done
expect 2 "batches" "$BIN" bench -m m.gguf --layer-times --prefills 0

# ---- cellsim on the calibrated model and on the K3 seed shape
$T "$CELLSIM" --calib cal.json --model calib --stages 1,1 --burst --users 1,3 --prompt 4 --gen 6 \
    >sim.txt 2>sim.err && ok || bad "cellsim pipeline: $(cat sim.err)"
grep -q "layer bytes from the shape .* MB + .* MB per expert; the file had" sim.txt && ok ||
    bad "no bytes line: $(head -5 sim.txt)"
# the shape's layer bytes are the file's
sed -n 's/.*from the shape \([0-9.]*\) MB + \([0-9.]*\) MB per expert; the file had \([0-9.]*\) + \([0-9.]*\)$/\1 \2 \3 \4/p' \
    sim.txt | awk '{exit !($1 == $3 && $2 == $4)}' && ok || bad "layer bytes differ: $(grep 'the file had' sim.txt)"
$T "$CELLSIM" --calib cal.json --model calib --stages 1,1 --burst --users 1,3 --prompt 4 --gen 6 --json \
    >sim.json && ok || bad "cellsim --json"
json 'for (const r of o.runs) if (r.requests_done != r.users || r.requests_short || !(r.agg_tps > 0)) process.exit(1);
      if (o.runs.length != 2) process.exit(1)' <sim.json && ok || bad "pipeline runs: $(cat sim.json)"
$T "$CELLSIM" --calib cal.json --machines 200 --ram-gb 64 --users 2 --duration-s 600 --warmup-s 60 \
    --fail-at-s 300 --bucket-s 60 --json >k3.json 2>k3.err && ok || bad "cellsim K3: $(cat k3.err)"
json 'const r = o.runs[0];
      if (!/2 pipelines/.test(o.topology) || r.requests_short || r.restored_ms <= 0) process.exit(1)' \
    <k3.json && ok || bad "K3 cell: $(head -c 800 k3.json)"

# ---- kimi-k3: KDA layer 0, MLA layer 1, a checkpoint every 2 layers, latent experts in MXFP4
$T "$BIN" mkmodel -o k.gguf --arch kimi-k3 --type q8_0 --layers 2 --dense-layers 0 --embd 256 \
    --heads 4 --kda-head-dim 32 --mla-layers 1 --res-block 2 --latent 128 --experts 8 \
    --experts-used 2 --ff-exp 64 && ok || bad "mkmodel kimi-k3"
$T "$BIN" bench -m k.gguf --layer-times -t 1 --batches 1,2,4 --prefills 8 -p 8 -r 2 --json \
    >kcal.json 2>kcal.err && ok || bad "bench kimi-k3: $(cat kcal.err)"
json '
if (o.arch != "kimi-k3" || o.matrix_type != "Q8_0" || o.expert_type != "MXFP4") process.exit(1);
if (JSON.stringify(o.mla_layers) != "[1]" || !o.mla_gate || o.res_block != 2 || o.latent != 128) process.exit(1);
if (o.kda_head_dim != 32 || o.conv_kernel != 4 || o.n_hidden != 256 * 2) process.exit(1);
if (Math.abs(o.decode[0].experts - 2) > 1e-6) { console.error("batch 1 read", o.decode[0].experts, "experts"); process.exit(1); }
' <kcal.json && ok || bad "kimi-k3 calibration: $(head -c 800 kcal.json)"
$T "$CELLSIM" --calib kcal.json --shape calib --stages 1,1 --burst --users 1,2 --prompt 4 --gen 6 \
    >ksim.txt 2>ksim.err && ok || bad "cellsim kimi-k3 pipeline: $(cat ksim.err)"
sed -n 's/.*from the shape \([0-9.]*\) MB + \([0-9.]*\) MB per expert; the file had \([0-9.]*\) + \([0-9.]*\)$/\1 \2 \3 \4/p' \
    ksim.txt | awk 'NF == 4 {n++; if ($1 != $3 || $2 != $4) bad = 1} END {exit bad || n != 1}' && ok ||
    bad "kimi-k3 layer bytes differ: $(grep 'the file had' ksim.txt)"
grep -q "layer    1 (MLA)" ksim.txt && grep -q "layer    0 (KDA)" ksim.txt && ok ||
    bad "no KDA and MLA layer lines: $(head -12 ksim.txt)"
$T "$CELLSIM" --calib kcal.json --shape calib --stages 1,1 --burst --users 1,2 --prompt 4 --gen 6 --json \
    >ksim.json && ok || bad "cellsim kimi-k3 --json"
json 'for (const r of o.runs) if (r.requests_done != r.users || r.requests_short || !(r.agg_tps > 0)) process.exit(1)' \
    <ksim.json && ok || bad "kimi-k3 pipeline runs: $(cat ksim.json)"
# K3's stages on 60 machines: the first is sent the stream, the last the stream and 15 checkpoints
$T "$CELLSIM" --hops --machines 60 --json >hops.json 2>hops.err && ok || bad "--hops: $(cat hops.err)"
json 'const h = o.hops, p0 = h.filter(x => x.pipeline == h[0].pipeline), last = p0[p0.length - 1];
      if (p0[0].layer_begin != 0 || p0[0].cols_in != 7168 || last.layer_end != 93) process.exit(1);
      if (last.cols_in != 7168 * (1 + Math.ceil(last.layer_begin / 6))) process.exit(1);
      if (last.f32_msg_in != 12 + 25 + 4 + 4 * last.cols_in + 20) process.exit(1);
      if (!(o.pipeline_bytes_per_token_f32 > o.plain_bytes_per_token_f32)) process.exit(1)' \
    <hops.json && ok || bad "K3 hops: $(head -c 800 hops.json)"
expect 0 "through pipeline 0" "$CELLSIM" --hops --shape deepseek2 --machines 100
expect 2 "for --shape kimi-k3" "$CELLSIM" --hops --shape deepseek2 --res-block 4
expect 2 "--mla-layers" "$CELLSIM" --hops --mla-layers 3,200
expect 2 "--shape" "$CELLSIM" --hops --shape kimi-k2

# ---- bad cellsim inputs
expect 2 "--calib FILE is required" "$CELLSIM" --users 1
echo "not json" >bad.json
expect 1 "bad.json" "$CELLSIM" --calib bad.json
echo '{"arch": "deepseek2"}' >half.json
expect 1 "half.json.*type" "$CELLSIM" --calib half.json
$T "$BIN" mkmodel -o l.gguf --arch llama --type q8_0 --layers 2 --embd 256 --heads 4 --heads-kv 2 \
    --head-dim 64 --experts 4 --experts-used 2 --ff-exp 128 >/dev/null && ok || bad "mkmodel llama"
$T "$BIN" bench -m l.gguf --layer-times -t 1 --batches 1,2,4 -p 4 -r 1 --json >lcal.json && ok ||
    bad "bench llama"
expect 1 "deepseek2 (MLA) and kimi-k3" "$CELLSIM" --calib lcal.json
expect 1 "stages hold 1 layers in all; the model has 2" "$CELLSIM" --calib cal.json --model calib --stages 1 --burst
expect 1 "fail over" "$CELLSIM" --calib cal.json --model calib --stages 1,1 --fail-at-s 1 --duration-s 10 --warmup-s 1
expect 1 "cannot hold the model" "$CELLSIM" --calib cal.json --machines 3 --ram-gb 8
expect 2 "unknown option" "$CELLSIM" --calib cal.json --colour blue
expect 2 "--users" "$CELLSIM" --calib cal.json --users 0
expect 2 "--wire" "$CELLSIM" --calib cal.json --wire f16
expect 2 "--calib-time" "$CELLSIM" --calib cal.json --calib-time best
finish
