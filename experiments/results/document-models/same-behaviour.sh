#!/bin/bash
# Behaviour unchanged (issue 62): the same short trainings and test translations with the code of
# OLD_WORKTREE (the commit before the issue, a1ed826) and with this checkout; prints whether the
# losses, validations and translations are the same.
set -e
cd "$(dirname "$0")/../../.."
OLD=${1:?usage: same-behaviour.sh OLD_WORKTREE (a checkout of the revision before, e.g. git worktree add /tmp/old a1ed826)}
for side in old new; do
  if [ $side = old ]; then export PYTHONPATH=$OLD; else unset PYTHONPATH; fi
  # the cross-sentence model, 200 updates at the protocol's sizes
  rm -rf /tmp/eq-$side-doc
  .venv/bin/python -m ctxnmt train configs/doc-init-both-gated-aux-small.yaml --set model_dir=/tmp/eq-$side-doc \
     --set model.emb_dim=128 --set model.hidden_dim=256 --set model.att_dim=256 --set training.threads=1 \
     --set training.max_updates=200 --set training.max_minutes=0 --set training.valid_every=100 \
     --set training.valid_max_sents=100 --set training.log_every=10 > /dev/null 2>&1
  # the demo's model (rnnsearch-small), 100 updates, then its test translation
  rm -rf /tmp/eq-$side-demo
  .venv/bin/python -m ctxnmt train configs/demo.yaml --set model_dir=/tmp/eq-$side-demo --set training.threads=1 \
     --set training.max_updates=100 --set training.cooldown_updates=50 --set training.max_minutes=0 --set training.valid_every=50 \
     --set training.valid_max_sents=100 --set training.log_every=10 > /dev/null 2>&1
  .venv/bin/python -m ctxnmt translate /tmp/eq-$side-demo -i data/bible/test.es -o /tmp/eq-$side-demo/test.hyp.en 2>/dev/null
  .venv/bin/python -m ctxnmt translate /tmp/eq-$side-doc -i data/bible/test.es --doc-ids data/bible/test.doc -o /tmp/eq-$side-doc/test.hyp.en 2>/dev/null
done
for run in doc demo; do
  echo "== $run"
  diff <(grep -oE "(update [0-9]+: loss/token [0-9.]+)|(validation .*)" /tmp/eq-old-$run/train.log) \
       <(grep -oE "(update [0-9]+: loss/token [0-9.]+)|(validation .*)" /tmp/eq-new-$run/train.log) && echo "same losses and validations"
  grep -c "loss/token" /tmp/eq-new-$run/train.log
  cmp /tmp/eq-old-$run/test.hyp.en /tmp/eq-new-$run/test.hyp.en && echo "same test translation ($(wc -l < /tmp/eq-new-$run/test.hyp.en) lines)"
done
