#!/usr/bin/env bash
# An exported model translates the Bible test split byte for byte as its run directory
# (issue 65), from the repository root (--documents: with the test split's document ids, for a
# document model):  experiments/results/sharing/export-bible.sh MODEL_DIR [--documents]
set -euo pipefail
model=$1
ctxnmt=${CTXNMT:-.venv/bin/ctxnmt}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
test=data/bible/test
docs=()
if [ "${2:-}" = --documents ]; then
  docs=(--doc-ids $test.doc)
fi
"$ctxnmt" export "$model" "$out/export" | sed "s|$out|OUT|g"
echo "files: $(cd "$out/export" && find . -type f | sort | tr '\n' ' ')"
echo "size: export $(du -sm "$out/export" | cut -f1) MB, model directory $(du -sm "$model" | cut -f1) MB"
"$ctxnmt" translate "$model" -i $test.es "${docs[@]}" -o "$out/dir.en"
"$ctxnmt" translate "$out/export" -i $test.es "${docs[@]}" -o "$out/exported.en"
echo "model directory: $(sha256sum < "$out/dir.en" | cut -c1-16)  $(wc -l < "$out/dir.en") lines"
echo "export:          $(sha256sum < "$out/exported.en" | cut -c1-16)  $(wc -l < "$out/exported.en") lines"
cmp -s "$out/dir.en" "$out/exported.en" && echo "identical" || { echo "DIFFERENT"; exit 1; }
