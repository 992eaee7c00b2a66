"""Same-budget experiments: the experiment file, runs, evaluation and the report."""
