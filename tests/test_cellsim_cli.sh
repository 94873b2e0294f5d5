#!/usr/bin/env bash
# test_cellsim_cli.sh - `moontail bench --layer-times` and `cellsim` end to end:
#   - on a synthetic deepseek2 model (2 MoE layers, 8 experts, 2 per token), the
#     matrix products of a decode step of one session read each layer's
#     non-expert matrices and exactly 2 experts (as the file's tensor sizes
#     say), more sessions touch more experts but never more than 8, every time
#     is positive;
#   - cellsim takes that calibration, finds the layer bytes equal to the file's,
#     and simulates the model as a pipeline (every requester finishes) and the
#     Kimi K3 seed shape as a placed cell (with a failure: no request short);
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
expect 1 "deepseek2" "$CELLSIM" --calib lcal.json
expect 1 "stages hold 1 layers in all; the model has 2" "$CELLSIM" --calib cal.json --model calib --stages 1 --burst
expect 1 "fail over" "$CELLSIM" --calib cal.json --model calib --stages 1,1 --fail-at-s 1 --duration-s 10 --warmup-s 1
expect 1 "cannot hold the model" "$CELLSIM" --calib cal.json --machines 3 --ram-gb 8
expect 2 "unknown option" "$CELLSIM" --calib cal.json --colour blue
expect 2 "--users" "$CELLSIM" --calib cal.json --users 0
expect 2 "--wire" "$CELLSIM" --calib cal.json --wire f16
expect 2 "--calib-time" "$CELLSIM" --calib cal.json --calib-time best
finish
