"""Verify an artifact (``.venv/bin/python -m pipeline.verify ARTIFACT [--quick]``): checksums, counts, schema and
version, and the format's invariants; the command and what it reports are ``artifact``'s docstring.

The modules, in the order the checks run (each imports only those before it): ``tree`` (list the files, never
through a link), ``removed`` (what each record of ``removed/<reason>.jsonl`` says, and what they name), ``rows``
(the rows of one shard, batch by batch), ``artifact`` (all of them, the manifest's counts, the command line;
``__main__`` runs it).
"""

from pipeline.verify.artifact import Report, main, verify

__all__ = ["Report", "main", "verify"]
