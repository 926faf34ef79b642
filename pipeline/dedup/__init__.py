"""Duplicate documents and evaluation-set overlap (issue 35): text rules, MinHash, the Beam stage."""
