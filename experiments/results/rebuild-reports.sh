#!/usr/bin/env bash
# Rebuilds every committed experiment report from its exported runs (`ctxnmt experiment --report
# --restore`, no checkpoints needed) in a scratch directory, each from the experiment file as it was
# when its report was committed, and says whether report.md/.csv/.json come out byte for byte:
#
#   experiments/results/rebuild-reports.sh [SCRATCH_DIR] > experiments/results/rebuild-reports.txt
#
# from the repository root, with the corpus prepared (make data).  Several minutes per experiment on
# two cores: the significance tests run again.
set -euo pipefail
root=$PWD
ctxnmt=${CTXNMT:-$root/.venv/bin/ctxnmt}
scratch=${1:-$(mktemp -d)}
mkdir -p "$scratch/experiments" "$scratch/logs"
for link in configs data experiments/results experiments/pronouns; do
  ln -sfn "$root/$link" "$scratch/$link"
done
echo "source: $(git rev-parse HEAD)"
for yaml in experiments/*.yaml; do
  name=$(sed -n 's/^name: *//p' "$yaml" | head -n 1)
  results=experiments/results/$name
  [ -f "$results/report.md" ] || continue
  written=$(git log -1 --format=%H -- "$results/report.md")
  git show "$written:$yaml" > "$scratch/$yaml"
  rm -rf "$scratch/runs/exp/$name"
  (cd "$scratch" && "$ctxnmt" experiment "$yaml" --report --restore "$results" \
    > "logs/$name.out" 2> "logs/$name.err") || { echo "$name: failed (see $scratch/logs/$name.err)"; continue; }
  for file in report.md report.csv report.json; do
    [ -f "$results/$file" ] || continue
    if cmp -s "$scratch/runs/exp/$name/$file" "$results/$file"; then
      echo "$name $file: the same bytes"
    else
      echo "$name $file: differs"
    fi
  done
done
