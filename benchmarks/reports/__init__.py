"""Reports over finished runs: success curves and tables with bootstrap intervals, comparisons of two sets of runs,
and the paper's curves (``paper_curves.csv``) beside ours."""
