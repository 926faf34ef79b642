"""pipeline/dedup/word_table.py, which the word rule reads instead of scanning every code point, is what the scan
gives under this Python's Unicode tables (``benchmarks/make_word_table.py`` rewrites it)."""

from __future__ import annotations

import unicodedata

import numpy as np

from benchmarks.make_word_table import TABLE, table_text
from pipeline.dedup import word_rules, word_table


def test_the_stored_table_is_the_scan_of_this_pythons_unicode_tables():
    assert word_table.UNIDATA_VERSION == unicodedata.unidata_version  # else the rule scans: the table is not read
    marks, unspaced, word = word_rules.scan()
    stored = word_rules.stored()
    assert stored is not None
    assert stored[0] == marks and stored[1] == unspaced and np.array_equal(stored[2], word)
    assert len(marks) > 2000 and len(unspaced) > 90000 and word.sum() > 100000  # it held something to compare
    assert TABLE.read_text(encoding="utf-8") == table_text()  # as the script writes it (make_word_table --check)
