#!/usr/bin/env bash
# Checkpoint averaging on the demo (issue 65), from the repository root: the demo's training
# keeping its last five checkpoints (every 100 updates: 600 … 1,000), then best.pt against the
# average of those five on the Bible test split, paired approximate randomisation.
#
#   ctxnmt train configs/demo.yaml --set model_dir=runs/demo-average --set training.keep_checkpoints=5 \
#       --set training.checkpoint_every=100 --set training.threads=1
#   experiments/results/sharing/average-demo.sh runs/demo-average > experiments/results/sharing/average-demo.txt
set -euo pipefail
model=$1
ctxnmt=${CTXNMT:-.venv/bin/ctxnmt}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
test=data/bible/test
"$ctxnmt" average "$model" --last 5 -o "$out/average.pt" | sed "s|$out|OUT|g"
grep -E "validation at|training stopped" "$model/train.log" | cut -d' ' -f3-
"$ctxnmt" translate "$model" --checkpoint best -i $test.es -o "$out/best.en"
"$ctxnmt" translate "$model" --checkpoint "$out/average.pt" -i $test.es -o "$out/average.en"
echo "first --hyp: best.pt; second: the average of the last five"
"$ctxnmt" score --hyp "$out/best.en" --hyp "$out/average.en" -r $test.en --lang en --significance ar | sed "s|$out|OUT|g"
