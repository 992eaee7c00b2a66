#!/bin/bash
# Behaviour unchanged (issues 62 and 63): the same short trainings and test translations with the code
# of OLD_WORKTREE (a1ed826, the commit before both issues) and with this checkout; prints whether the
# losses, validations and translations are the same.  Each side prepares its own data (its own prep/).
set -e
cd "$(dirname "$0")/../.."
OLD=${1:?usage: same-behaviour.sh OLD_WORKTREE (a checkout of the revision before, e.g. git worktree add /tmp/old a1ed826)}
echo "old: $(git -C "$OLD" rev-parse --short HEAD); new: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- ctxnmt || echo ' (changed)')"
for side in old new; do
  if [ $side = old ]; then code=$OLD; else code=$PWD; fi
  # -P: no current directory on sys.path, which would put this checkout's code before PYTHONPATH's
  py() { PYTHONPATH=$code .venv/bin/python -P "$@"; }
  echo "$side: $(py -c 'import ctxnmt; print(ctxnmt.__file__)')"
  # the cross-sentence model, 200 updates at the protocol's sizes
  rm -rf /tmp/eq-$side-doc
  py -m ctxnmt train configs/doc-init-both-gated-aux-small.yaml --set model_dir=/tmp/eq-$side-doc \
     --set model.emb_dim=128 --set model.hidden_dim=256 --set model.att_dim=256 --set training.threads=1 \
     --set training.max_updates=200 --set training.max_minutes=0 --set training.valid_every=100 \
     --set training.valid_max_sents=100 --set training.log_every=10 > /dev/null 2>&1
  # the demo's model (rnnsearch-small), 100 updates, then its test translation
  rm -rf /tmp/eq-$side-demo
  py -m ctxnmt train configs/demo.yaml --set model_dir=/tmp/eq-$side-demo --set training.threads=1 \
     --set training.max_updates=100 --set training.cooldown_updates=50 --set training.max_minutes=0 --set training.valid_every=50 \
     --set training.valid_max_sents=100 --set training.log_every=10 > /dev/null 2>&1
  py -m ctxnmt translate /tmp/eq-$side-demo -i data/bible/test.es -o /tmp/eq-$side-demo/test.hyp.en 2>/dev/null
  py -m ctxnmt translate /tmp/eq-$side-doc -i data/bible/test.es --doc-ids data/bible/test.doc -o /tmp/eq-$side-doc/test.hyp.en 2>/dev/null
done
for run in doc demo; do
  echo "== $run"
  diff <(grep -oE "(update [0-9]+: loss/token [0-9.]+)|(validation .*)" /tmp/eq-old-$run/train.log) \
       <(grep -oE "(update [0-9]+: loss/token [0-9.]+)|(validation .*)" /tmp/eq-new-$run/train.log) && echo "same losses and validations"
  grep -c "loss/token" /tmp/eq-new-$run/train.log
  cmp /tmp/eq-old-$run/test.hyp.en /tmp/eq-new-$run/test.hyp.en && echo "same test translation ($(wc -l < /tmp/eq-new-$run/test.hyp.en) lines)"
done
for run in doc demo; do
  echo "prep/ of $run: old $(ls /tmp/eq-old-$run/prep | tr '\n' ' '); new $(ls /tmp/eq-new-$run/prep | tr '\n' ' ')"
done
