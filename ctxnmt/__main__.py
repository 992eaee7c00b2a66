"""`python -m ctxnmt …`, as torchrun runs it: `torchrun … -m ctxnmt train CONFIG`."""
import sys

from ctxnmt.cli import main

sys.exit(main())
