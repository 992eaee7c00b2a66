#!/bin/bash
# Behaviour unchanged (issues 62 and 63): the same trainings and test translations with the code of
# OLD_WORKTREE (a1ed826, the commit before both issues) and with this checkout; prints whether the
# losses, validations and translations are the same.  Each side prepares its own data (its own prep/)
# and runs on its own core, the two sides at once.
#   doc:  the cross-sentence model, 200 updates at the protocol's sizes, and its test translation
#   demo: `make demo` as the Makefile runs it (configs/demo.yaml, its whole budget of 1,000 updates,
#         beam 5 on the CPU), one thread, its test translation and its score
# With --compare as its second word it compares the runs /tmp/eq-* already hold (each run's train.log
# names the commit that trained it).
set -e
cd "$(dirname "$0")/../.."
OLD=${1:?usage: same-behaviour.sh OLD_WORKTREE (a checkout of the revision before, e.g. git worktree add /tmp/old a1ed826)}
OLD=$(cd "$OLD" && pwd)
echo "old: $(git -C "$OLD" rev-parse --short HEAD); new: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- ctxnmt || echo ' (changed)')"

side() {  # side NAME CODE: both runs with CODE's package, logging to /tmp/eq-NAME.log
  local name=$1 code=$2
  # -P: no current directory on sys.path, which would put this checkout's code before PYTHONPATH's
  py() { PYTHONPATH=$code .venv/bin/python -P "$@"; }
  echo "$name: $(py -c 'import ctxnmt; print(ctxnmt.__file__)')"
  rm -rf /tmp/eq-$name-doc /tmp/eq-$name-demo
  py -m ctxnmt train configs/doc-init-both-gated-aux-small.yaml --set model_dir=/tmp/eq-$name-doc \
     --set model.emb_dim=128 --set model.hidden_dim=256 --set model.att_dim=256 --set training.threads=1 \
     --set training.max_updates=200 --set training.max_minutes=0 --set training.valid_every=100 \
     --set training.valid_max_sents=100 --set training.log_every=10 >> /tmp/eq-$name.log 2>&1
  py -m ctxnmt translate /tmp/eq-$name-doc -i data/bible/test.es --doc-ids data/bible/test.doc \
     -o /tmp/eq-$name-doc/test.hyp.en >> /tmp/eq-$name.log 2>&1
  py -m ctxnmt train configs/demo.yaml --set model_dir=/tmp/eq-$name-demo --set training.threads=1 \
     >> /tmp/eq-$name.log 2>&1
  py -m ctxnmt translate /tmp/eq-$name-demo -i data/bible/test.es -o /tmp/eq-$name-demo/test.hyp.en \
     --beam 5 --device cpu >> /tmp/eq-$name.log 2>&1
  py -m ctxnmt score --hyp /tmp/eq-$name-demo/test.hyp.en --ref data/bible/test.en --lang en \
     --metrics bleu,chrf > /tmp/eq-$name-demo/score.txt 2>> /tmp/eq-$name.log
}
if [ "${2:-}" != --compare ]; then
  rm -f /tmp/eq-old.log /tmp/eq-new.log
  side old "$OLD" & old=$!
  side new "$PWD" & new=$!
  wait $old || { echo "the old side failed: /tmp/eq-old.log"; exit 1; }
  wait $new || { echo "the new side failed: /tmp/eq-new.log"; exit 1; }
fi

same() { cmp -s "$1" "$2" && echo "same" || echo "DIFFERENT"; }
for run in doc demo; do
  echo "== $run"
  for name in old new; do echo "$name trained by $(grep -o 'source: .*' /tmp/eq-$name-$run/train.log | head -1)"; done
  lines() { grep -oE "(update [0-9]+: loss/token [0-9.]+)|(validation .*)" /tmp/eq-$1-$run/train.log; }
  diff <(lines old) <(lines new) && echo "same losses and validations ($(lines new | grep -c loss/token) losses, $(lines new | grep -c validation) validations)"
  lines new | grep validation | sed 's/^/  /'
  echo "test translation ($(wc -l < /tmp/eq-new-$run/test.hyp.en) lines): $(same /tmp/eq-{old,new}-$run/test.hyp.en)"
done
# the score's first line names the file scored, which is each side's own
echo "demo score: $(same <(tail -n +2 /tmp/eq-old-demo/score.txt) <(tail -n +2 /tmp/eq-new-demo/score.txt))"
sed 's/^/  /' /tmp/eq-new-demo/score.txt
for run in doc demo; do
  echo "prep/ of $run: old $(ls /tmp/eq-old-$run/prep | tr '\n' ' '); new $(ls /tmp/eq-new-$run/prep | tr '\n' ' ')"
done
