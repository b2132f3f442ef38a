"""Parity tools against the reference implementation: the same updates, windows and policies computed by both, run
through the reference's own code in its own Python."""
