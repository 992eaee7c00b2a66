#!/usr/bin/env bash
# The context-use measurements of one finished run of an experiment (docs/context-use.md), into
# experiments/results/context-use/SYSTEM/seedN beside the run's exported files, from the
# repository root, after `ctxnmt experiment experiments/EXPERIMENT.yaml --report --export`:
#
#   experiments/results/document-models/measure.sh SYSTEM SEED [EXPERIMENT]
#
# then `python experiments/results/context-use/summarise.py > experiments/results/context-use/summary.md`.
set -euo pipefail
system=$1
seed=$2
experiment=${3:-document-models}
ctxnmt=${CTXNMT:-.venv/bin/ctxnmt}
run=runs/exp/$experiment/systems/$system/seed$seed
exported=experiments/results/$experiment/systems/$system/seed$seed
out=experiments/results/context-use/$system/seed$seed
test=data/bible/test
for file in config.yaml decode.json done.json scores.json test.hyp.en train.log; do
  test -f "$exported/$file" || { echo "measure.sh: $exported/$file: missing (export the run first)" >&2; exit 1; }
done
mkdir -p "$out"
for file in config.yaml decode.json done.json scores.json test.hyp.en train.log; do
  cp "$exported/$file" "$out/"
done
"$ctxnmt" analyze cxmi "$run" -i $test.es -r $test.en --doc-ids $test.doc -o "$out/cxmi" > "$out/cxmi.md"
gzip -nf "$out/cxmi/tokens.tsv"  # each test token's log-probabilities: 2 MB as text
"$ctxnmt" score contrastive "$run" experiments/pronouns/bible-test.json -o "$out/contrastive-test.json" \
  > "$out/contrastive-test.md"
"$ctxnmt" analyze context "$run" -i $test.es -r $test.en --doc-ids $test.doc -o "$out/context" > "$out/context.md"
