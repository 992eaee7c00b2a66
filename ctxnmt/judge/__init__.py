"""Blind pairwise human ranking of translations (`ctxnmt judge`)."""
