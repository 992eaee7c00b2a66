"""`python -m ctxnmt …`, as torchrun runs it and `ctxnmt train --nproc` starts its ranks:
`torchrun … -m ctxnmt train CONFIG`."""
import sys

from ctxnmt.cli import run_as_rank

sys.exit(run_as_rank())
