"""An artifact's rows, read back for tests of the trainer's row handling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.ipc as ipc

from schemas.artifact import Artifact
from trainer.masking import Rows


def all_rows(artifact_dir: Path) -> Rows:
    """Every row in sample-id order (shard order), with sentence starts and document ids."""
    art = Artifact.open(str(artifact_dir))
    ids, ws, ss, docs = [], [], [], []
    for rel in art.shard_paths:
        table = ipc.open_file(art.path(rel)).read_all()
        ids += table.column("input_ids").to_pylist()
        ws += table.column("word_start").to_pylist()
        ss += table.column("sentence_start").to_pylist()
        docs += table.column("doc_id").to_pylist()
    rows = Rows.from_lists(ids, ws)
    rows.sentence_start = np.concatenate([np.asarray(s, dtype=bool) for s in ss])
    rows.doc_id = np.array(docs, dtype=object)
    return rows
