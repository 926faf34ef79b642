"""1. Read: raw corpus files -> documents and dead letters.

In: input paths (local, gs://, s3://; JSONL[.gz|.zst], WikiText, plain text, Parquet, the Arrow files of a
``datasets`` save_to_disk directory). Out (``ReadDocuments`` in
``documents.py``): :class:`~pipeline.elements.Document` s, one :class:`~pipeline.elements.DeadLetter` per
rejected record, and one :class:`~pipeline.elements.InputSummary` per file. ``streams.py`` turns bytes into
lines in bounded memory, ``records.py`` lines into records (jsonl / wikitext / text), ``wikitext.py`` knows
WikiText's line format, ``record_checks.py`` the checks that keep a bad record from crashing a worker,
``columnar.py`` Parquet and Arrow files, a row group at a time, ``ranges.py`` the byte ranges that let several
workers read one big uncompressed file (lines, or the row groups that start in each range) with the records of a
whole-file read.
"""
