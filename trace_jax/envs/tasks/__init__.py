"""Synthetic task sources (seeded, with difficulty knobs): multi-hop QA, arithmetic, function calling."""
