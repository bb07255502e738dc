"""The equal-budget comparison of allocators (and TRACE's ablations): run grid, budget audit,
predictor generalization study, and the report (results.json, results.md, plots)."""
