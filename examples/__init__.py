"""Worked extension examples (docs/extending.md); each is imported and exercised by tests/examples/."""
