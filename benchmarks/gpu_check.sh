#!/usr/bin/env bash
# Issue 33's checks on one GPU, in one unattended run of about 8 minutes:
#
#   bash benchmarks/gpu_check.sh          # on the GPU machine; small logs under $OUT
#   bash benchmarks/gpu_check.sh --dry    # anywhere: every step at tiny sizes on the CPU (a smoke test)
#
# Steps, each under its own time limit, so that one failure costs only itself:
#   1. the machine: GPU, torch, cuDNN, and the packages the steps import       gpu.txt
#   2. the GPU paths against the plain path on CUDA (tests/models/test_gpu_cuda.py)  checks.txt
#   3. the speed table at the papers' size and batch (configs/rnnsearch.yaml, 80
#      sentences): fp32 and bf16 training, beam 5, without and with CUDA graphs of the
#      training step (training.cuda_graphs), in one benchmarks/speed.py run;
#      GPU_CHECK_BEFORE=1 adds each row without the GPU paths (CTXNMT_GPU_FAST=0)  speed.txt
#   4. a plain one-file PyTorch RNNsearch beside ctxnmt, eager and with CUDA graphs
#      (benchmarks/gpu_reference.py --graphs)                                   reference.txt
#   5. `ctxnmt train configs/rnnsearch-gpu.yaml` (with training.cuda_graphs) for about
#      4 minutes (GPU_CHECK_TRAIN_MINUTES), then the test set with beam 5, scored  train.txt, test.txt, test.hyp.en
#   and the time and exit status of every step                                  summary.txt
#
# GPU_CHECK_STEPS chooses the steps (default "checks speed reference train"); two more:
#   beam     beam 5, fp32 and bf16, of this tree (also with decoding.cuda_graphs) and of the
#            commit GPU_CHECK_BEAM_BEFORE (a git worktree on the machine), in this run  beam.txt
#   flags    `ctxnmt translate` of the test set with a carried model directory
#            (GPU_CHECK_FLAGS_MODEL), plain, --cuda-graphs, --bf16 and both: wall time,
#            BLEU, and whether graphs change the outputs                           flags.txt
#   profile  where a beam-5 step's time goes (benchmarks/search_profile.py): the model's step
#            against search's own bookkeeping, eager and with graphs, fp32 and bf16    profile.txt
#   feed     the GPU recipe fed by this tree's data path and by GPU_CHECK_BEAM_BEFORE's, each
#            trained GPU_CHECK_FEED_MINUTES (default 1.5) from its own prepared data (a
#            carried runs/feed-before-prep/ serves the older tree): target tokens/s   feed.txt
#   recipes  configs/rnnsearch-gpu.yaml with each override set of GPU_CHECK_RECIPES
#            ("NAME:key=v,key=v;NAME:..."), trained side by side on the one GPU for what
#            the budget leaves, then each one's test set                           recipes.txt
#
# The machine has no network and no package index: sacremoses and subword-nmt come as wheels
# in .whl/ (installed here into /tmp/site), ctxnmt runs from this working tree.  Preparing the
# Bible (tokenising, learning BPE) takes minutes of one core per vocabulary, so prepared
# copies can be carried: runs/bench-prep/ (the speed benchmarks' 30k vocabulary) and
# runs/rnnsearch-gpu/prep (the recipe's 8k).  Whatever is missing is prepared here, in the
# background while step 2 runs.  GPU_CHECK_BUDGET_S (default 480) bounds the whole run: the
# training gets what the steps before it left, at most 4 minutes.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$(date +%s)
DRY=0
[ "${1:-}" = "--dry" ] && DRY=1
PY=${PYTHON:-python3}
BUDGET=${GPU_CHECK_BUDGET_S:-480}
STEPS=" ${GPU_CHECK_STEPS:-checks speed reference train} "
has() { [[ "$STEPS" == *" $1 "* ]]; }
OUT=${OUT:-$ROOT/runs/gpu-check/out}
WORK=$ROOT/runs/gpu-check
mkdir -p "$OUT" "$WORK"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"

if [ "$DRY" = 0 ] && compgen -G ".whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$ROOT:${PYTHONPATH:-}
[ "$DRY" = 0 ] && export CTXNMT_KERNELS=${CTXNMT_KERNELS:-0}  # CPU kernels: nothing here runs on the CPU

if [ "$DRY" = 1 ]; then  # tiny sizes, the CPU, a few batches: does every step run?
  DEVICE=cpu
  SCALE=5  # time limits × 5: a shared CPU runs even tiny models slowly
  TINY="model.emb_dim=16,model.hidden_dim=32,model.att_dim=32,training.batch_sents=8"
  SPEED_ARGS=(--device cpu --train-batches 2 --warmup 1 --decode-sents 2 --decode-batch 2)
  REFERENCE_ARGS=(--device cpu --tiny --cgru)
  PROFILE_ARGS=(--device cpu --decode-sents 2 --decode-batch 2)
  GRAPHS=""  # CUDA graphs need CUDA
  TRAIN_SETS=(--set model.emb_dim=16 --set model.hidden_dim=32 --set model.att_dim=32 --set training.device=cpu
              --set training.max_updates=3 --set training.valid_every=2 --set training.valid_max_sents=4)
  TEST_LINES=4
else
  DEVICE=cuda
  SCALE=1
  TINY=""
  SPEED_ARGS=(--device cuda --train-batches 12 --warmup 3 --decode-sents 200 --decode-batch 100)
  REFERENCE_ARGS=(--device cuda --batches 8 --rounds 3 --cgru --graphs)
  PROFILE_ARGS=(--device cuda --decode-sents 200 --decode-batch 100 --graphs)
  GRAPHS="training.cuda_graphs=true"
  TRAIN_SETS=(--set "training.cuda_graphs=${GPU_CHECK_TRAIN_GRAPHS:-true}")  # false: the shipped recipe as is
  TEST_LINES=0
fi

# step NAME LIMIT_S LOG COMMAND...: run under a time limit, log its output, record time and status.
step() {
  local name=$1 limit=$(( $2 * SCALE )) log=$3 begin rc
  shift 3
  begin=$(date +%s)
  echo "== $name (limit ${limit}s) $(date +%T)" | tee -a "$log"
  timeout --signal=INT --kill-after=15 "$limit" "$@" >> "$log" 2>&1
  rc=$?
  echo "$name: exit status $rc, $(( $(date +%s) - begin ))s" | tee -a "$SUMMARY"
  return $rc
}

# 1. The machine.
{
  echo "revision: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)  dry: $DRY"
  command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm \
    --format=csv
  "$PY" - <<'EOF'
import importlib, os, torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
      f"{os.cpu_count()} CPU cores")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"GPU {p.name}, {p.total_memory / 2**30:.0f} GiB, capability {p.major}.{p.minor}, "
          f"bf16 {torch.cuda.is_bf16_supported()}, cuDNN TF32 {torch.backends.cudnn.allow_tf32}, "
          f"matmul TF32 {torch.backends.cuda.matmul.allow_tf32}")
    from ctxnmt.models import functional
    print(f"fused CUDA GRU cell: float32 {functional._cuda_cell_serves(torch.float32)}, "
          f"bfloat16 {functional._cuda_cell_serves(torch.bfloat16)}")
else:
    print("no CUDA device")
for name in ("yaml", "tqdm", "numpy", "scipy", "sacrebleu", "regex", "joblib", "click", "sacremoses",
             "subword_nmt", "tensorboard", "pytest"):
    try:
        module = importlib.import_module(name)
        print(f"  {name} {getattr(module, '__version__', '')}")
    except Exception as err:
        print(f"  {name} MISSING ({type(err).__name__}: {err})")
EOF
} > "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"

# Data: whatever was not carried is prepared in the background (one core each).
BENCH_CONFIG="configs/rnnsearch.yaml"
MODEL=$WORK/rnnsearch-gpu
rm -rf "$MODEL" && mkdir -p "$MODEL"
[ -d runs/rnnsearch-gpu/prep ] && cp -r runs/rnnsearch-gpu/prep "$MODEL/"
"$PY" -c "from benchmarks.common import prepared_data; from ctxnmt.config import load_config; \
prepared_data(load_config('$BENCH_CONFIG'))" > "$WORK/prep-bench.log" 2>&1 &
PREP_BENCH=$!
"$PY" -m ctxnmt prepare configs/rnnsearch-gpu.yaml --set "model_dir=$MODEL" > "$WORK/prep-gpu.log" 2>&1 &
PREP_GPU=$!

# 2. The GPU paths against the plain path, on CUDA (without pytest, which the machine may lack).
has checks && step checks 90 "$OUT/checks.txt" "$PY" -m tests.models.test_gpu_cuda

# 3. The speed table: fp32 and bf16, without and with CUDA graphs (and before the GPU paths), in one run.
wait $PREP_BENCH || { echo "preparing $BENCH_CONFIG failed:"; tail -n 15 "$WORK/prep-bench.log"; } | tee -a "$SUMMARY"
ROWS=()
for precision in fp32 bf16; do
  for graphs in "" $GRAPHS; do
    sets=$(IFS=,; echo "${TINY:+$TINY,}training.precision=$precision${graphs:+,$graphs}")
    ROWS+=("$BENCH_CONFIG::$sets")
  done
done
BEFORE=()
[ "${GPU_CHECK_BEFORE:-0}" = 1 ] && BEFORE=(--before)
# The benchmark's model is untrained: under the shipped length penalty it ends most outputs at
# once, so beam search runs with the lengths the earlier figures had (power, α = 1, 2|x| + 10).
FIXED_LENGTHS=decoding.length_penalty_kind=power,decoding.length_penalty=1.0,decoding.max_len_rule=fixed,decoding.max_len_a=2.0,decoding.max_len_b=10
has speed && step speed 200 "$OUT/speed.txt" "$PY" benchmarks/speed.py "${ROWS[@]}" "${BEFORE[@]}" --beams 5 --decode-repeats 1 \
  --decoding "$FIXED_LENGTHS" "${SPEED_ARGS[@]}"

# 4. The plain one-file RNNsearch beside ctxnmt, 80 sentences a batch.
has reference && step reference 150 "$OUT/reference.txt" "$PY" benchmarks/gpu_reference.py --config "$BENCH_CONFIG" \
  "${REFERENCE_ARGS[@]}"

# 4b. Beam search of this tree and of GPU_CHECK_BEAM_BEFORE's, one after the other.
if has beam; then
  BEAM_ROWS=("$BENCH_CONFIG::${TINY:+$TINY,}training.precision=fp32" "$BENCH_CONFIG::${TINY:+$TINY,}training.precision=bf16")
  BEAM_ARGS=(--beams 5 --decode-repeats 3 --decoding "$FIXED_LENGTHS" "${SPEED_ARGS[@]}" --train-batches 2 --warmup 1)
  BEFORE_TREE=$WORK/before
  rm -rf "$BEFORE_TREE"
  if [ "${GPU_CHECK_BEAM_BEFORE:-}" = none ]; then
    echo "before: none asked for" >> "$OUT/beam.txt"
  elif git worktree add -f --detach "$BEFORE_TREE" "${GPU_CHECK_BEAM_BEFORE:-HEAD}" > "$WORK/worktree.log" 2>&1; then
    ln -sfn "$ROOT/runs" "$BEFORE_TREE/runs" && ln -sfn "$ROOT/data" "$BEFORE_TREE/data"
    echo "before: $(git -C "$BEFORE_TREE" log --oneline -1)" >> "$OUT/beam.txt"
    PYTHONPATH=$BEFORE_TREE:$PYTHONPATH step beam-before 90 "$OUT/beam.txt" "$PY" "$BEFORE_TREE/benchmarks/speed.py" \
      "${BEAM_ROWS[@]}" "${BEAM_ARGS[@]}"
  else
    echo "no worktree of ${GPU_CHECK_BEAM_BEFORE:-HEAD}: $(tail -n 1 "$WORK/worktree.log")" | tee -a "$SUMMARY"
  fi
  GRAPHED_ROWS=()
  [ -n "$GRAPHS" ] && GRAPHED_ROWS=("${BEAM_ROWS[0]},decoding.cuda_graphs=true" "${BEAM_ROWS[1]},decoding.cuda_graphs=true")
  step beam-after 120 "$OUT/beam.txt" "$PY" benchmarks/speed.py "${BEAM_ROWS[@]}" "${GRAPHED_ROWS[@]}" "${BEAM_ARGS[@]}"
fi

# 4e. The GPU recipe fed by this tree's data path and by the older tree's, one after the other.
if has feed; then
  FEED_MINUTES=${GPU_CHECK_FEED_MINUTES:-1.5}
  [ "$DRY" = 1 ] && FEED_MINUTES=0.2
  FEED_BEFORE=$WORK/feed-tree
  rm -rf "$FEED_BEFORE"
  git worktree add -f --detach "$FEED_BEFORE" "${GPU_CHECK_FEED_BEFORE:-HEAD}" > "$WORK/feed-worktree.log" 2>&1 \
    && ln -sfn "$ROOT/data" "$FEED_BEFORE/data"
  for which in after before; do
    tree=$ROOT
    [ "$which" = before ] && tree=$FEED_BEFORE
    dir=$WORK/feed-$which
    rm -rf "$dir" && mkdir -p "$dir"
    [ "$which" = before ] && [ -d runs/feed-before-prep ] && cp -r runs/feed-before-prep "$dir/prep"
    echo "== feed $which: $(git -C "$tree" log --oneline -1 2>/dev/null | cut -c1-80)" >> "$OUT/feed.txt"
    # python -m runs the checkout in the working directory, so each tree runs from its own
    (cd "$tree" && PYTHONPATH=$tree:$PYTHONPATH step "feed-$which" $(( 240 + ${FEED_MINUTES%.*} * 60 )) \
      "$OUT/feed.txt" "$PY" -m ctxnmt train configs/rnnsearch-gpu.yaml --set "model_dir=$dir" \
      --max-minutes "$FEED_MINUTES" --quiet --set training.valid_every=1000000 "${TRAIN_SETS[@]}")
    grep -E "prepare:|model:| update [0-9]+:|training stopped" "$dir/train.log" | tail -n 12 >> "$OUT/feed.txt"
  done
fi

# 4c. Where a beam step's time goes, on the beam step's model and lengths.
if has profile; then
  PROFILE_SETS=()
  IFS=, read -ra sets <<< "${TINY:+$TINY,}$FIXED_LENGTHS"
  for item in "${sets[@]}"; do PROFILE_SETS+=(--set "$item"); done
  for precision in "" --bf16; do
    # shellcheck disable=SC2086  # $precision is one flag or none
    step "profile${precision:+-bf16}" 90 "$OUT/profile.txt" "$PY" benchmarks/search_profile.py "$BENCH_CONFIG" \
      "${PROFILE_SETS[@]}" "${PROFILE_ARGS[@]}" $precision
  done
fi

# 4d. translate's GPU flags, each a whole command (start-up and model loading included).
if has flags; then
  FLAGS_MODEL=${GPU_CHECK_FLAGS_MODEL:-runs/demo}
  FLAG_SETS=("" "--cuda-graphs" "--bf16" "--bf16 --cuda-graphs")
  [ "$DRY" = 1 ] && FLAG_SETS=("")  # both flags need CUDA
  for flags in "${FLAG_SETS[@]}"; do
    name=plain${flags:+_$(echo "$flags" | tr -d '-' | tr ' ' '_')}
    begin=$(date +%s.%N)
    # shellcheck disable=SC2086  # $flags is a list of flags
    step "translate-$name" 60 "$OUT/flags.log" "$PY" -m ctxnmt translate "$FLAGS_MODEL" -i data/bible/test.es \
      -o "$OUT/flags-$name.en" --beam 5 --device "$DEVICE" $flags
    seconds=$("$PY" -c "print(round($(date +%s.%N) - $begin, 2))")
    echo "${flags:-plain}: ${seconds}s, $("$PY" -m ctxnmt score --hyp "$OUT/flags-$name.en" --ref data/bible/test.en \
      --metrics bleu 2>&1 | grep -o 'BLEU|[^ ]* = [0-9.]*' | head -n 1)" | tee -a "$OUT/flags.txt"
  done
  while read -r a b; do
    [ -f "$OUT/flags-$b.en" ] && echo "$a vs $b: $(diff "$OUT/flags-$a.en" "$OUT/flags-$b.en" | grep -c '^<') lines differ" \
      | tee -a "$OUT/flags.txt"
  done <<'PAIRS'
plain plain_cudagraphs
plain_bf16 plain_bf16_cudagraphs
plain plain_bf16
PAIRS
fi

# The GPU recipe's data: prepared in the background above, or carried.
wait $PREP_GPU || { echo "preparing configs/rnnsearch-gpu.yaml failed:"; tail -n 15 "$WORK/prep-gpu.log"; } \
  | tee -a "$SUMMARY"
SRC=data/bible/test.es
REF=data/bible/test.en
if [ "$TEST_LINES" -gt 0 ]; then
  head -n "$TEST_LINES" "$SRC" > "$WORK/test.es" && head -n "$TEST_LINES" "$REF" > "$WORK/test.en"
  SRC=$WORK/test.es
  REF=$WORK/test.en
fi
# MINUTES and LIMIT: what the budget leaves for training, less `reserve` seconds after it.
training_minutes() {
  local left=$(( BUDGET - ($(date +%s) - START) - $1 ))
  MINUTES=$("$PY" -c "print(round(max(0.5, min($2, $left / 60)), 2))")
  [ "$DRY" = 1 ] && MINUTES=0.2
  LIMIT=$("$PY" -c "print(int($MINUTES * 60 + 150))")  # validations and start-up on top of the training time
  echo "training for $MINUTES minutes (budget left: ${left}s before the test set)" | tee -a "$SUMMARY"
}

# 5. The GPU recipe: train for what the budget leaves (at most GPU_CHECK_TRAIN_MINUTES, default 4),
# then the test set.
if has train; then
  training_minutes 100 "${GPU_CHECK_TRAIN_MINUTES:-4.0}"  # 100 s: validations, the final save, the test set
  step train "$LIMIT" "$OUT/train.txt" "$PY" -m ctxnmt train configs/rnnsearch-gpu.yaml \
    --set "model_dir=$MODEL" --max-minutes "$MINUTES" --quiet "${TRAIN_SETS[@]}"
  cat "$MODEL/train.log" >> "$OUT/train.txt" 2> /dev/null
  step translate 120 "$OUT/test.txt" "$PY" -m ctxnmt translate "$MODEL" -i "$SRC" -o "$OUT/test.hyp.en" --beam 5 \
    --device "$DEVICE"
  step score 60 "$OUT/test.txt" "$PY" -m ctxnmt score --hyp "$OUT/test.hyp.en" --ref "$REF" --metrics bleu,chrf
fi

# 6. Recipe candidates side by side on the one GPU (each slows the others: the log gives
# each one's updates and tokens/s), then each one's test set.
if has recipes; then
  IFS=';' read -r -a RECIPES <<< "${GPU_CHECK_RECIPES:-}"
  training_minutes 100 10.0
  PIDS=()
  for recipe in "${RECIPES[@]}"; do
    name=${recipe%%:*}
    dir=$WORK/recipe-$name
    rm -rf "$dir" && mkdir -p "$dir" && cp -r "$MODEL/prep" "$dir/"
    sets=()
    IFS=',' read -r -a kv <<< "${recipe#*:}"
    for x in "${kv[@]}"; do [ -n "$x" ] && sets+=(--set "$x"); done
    [ "$DRY" = 1 ] && sets+=("${TRAIN_SETS[@]}")
    echo "recipe $name: ${recipe#*:}" | tee -a "$OUT/recipes.txt"
    step "train-$name" "$LIMIT" "$WORK/recipe-$name.log" "$PY" -m ctxnmt train configs/rnnsearch-gpu.yaml \
      --set "model_dir=$dir" --max-minutes "$MINUTES" --quiet "${sets[@]}" &
    PIDS+=($!)
  done
  wait "${PIDS[@]}"
  for recipe in "${RECIPES[@]}"; do
    name=${recipe%%:*}
    dir=$WORK/recipe-$name
    { echo "== recipe $name: ${recipe#*:}"; grep -E "validation|training stopped" "$dir/train.log"
      grep -E " update [0-9]+:" "$dir/train.log" | tail -n 2; } \
      >> "$OUT/recipes.txt" 2>&1
    step "translate-$name" 120 "$OUT/recipes.txt" "$PY" -m ctxnmt translate "$dir" -i "$SRC" \
      -o "$OUT/recipe-$name.hyp.en" --beam 5 --device "$DEVICE"
    step "score-$name" 60 "$OUT/recipes.txt" "$PY" -m ctxnmt score --hyp "$OUT/recipe-$name.hyp.en" --ref "$REF" \
      --metrics bleu,chrf
  done
fi
echo "total $(( $(date +%s) - START ))s" | tee -a "$SUMMARY"
