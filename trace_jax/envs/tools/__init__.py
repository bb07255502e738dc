"""Tools the agents call: BM25 search, a safe calculator, function-call parsing and checking."""
