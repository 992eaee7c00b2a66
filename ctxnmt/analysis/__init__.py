"""Analysis of trained models: attention statistics, trees, gate values, plots."""
