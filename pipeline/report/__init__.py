"""Show an artifact: plots and ``report/index.html``, and a dataset card ``README.md``.

    .venv/bin/python -m pipeline.report ARTIFACT                      # local path, gs://, s3://, hdfs://
    .venv/bin/python -m pipeline.report ARTIFACT --license cc-by-sa-3.0 \\
        --source-license "WikiText-103: CC BY-SA 3.0 (Merity et al., 2016)" --pretty-name "WikiText-103 for SpanBERT"
    .venv/bin/python -m pipeline.build_shards ... --report            # the same, at the end of the build

What flows in: an artifact (read only through ``schemas.artifact.Artifact``; the n-gram dictionary named in
its manifest is read too, through ``schemas.ngram_dictionary``, when it is reachable). What flows out, through
the same filesystem:

    ARTIFACT/report/index.html      self-contained page (inline CSS, no scripts, no external resources)
    ARTIFACT/report/*.png           the plots it shows
    ARTIFACT/README.md              a dataset card in the style of Hugging Face's (numbers from the manifest)

Neither is listed in the manifest, so ``.venv/bin/python -m pipeline.verify`` is unaffected. The shards are read
record batch by record batch. Artifacts of more than ``--max-rows`` rows are sampled: a fixed-seed random
choice of record batches (each row equally likely); a document is counted in "tokens per document" when its
first row is in a sampled batch, and is then followed to its end, so long documents are not under-counted.
The same artifact and options give the same report, byte for byte.

The modules, in the order the data flows (each imports only those before it): ``common`` (error, names,
wording), ``statistics`` (shards and dictionary -> ``Stats``, ``Dictionary``), ``plots`` (-> PNG figures),
``page`` (-> index.html), ``card`` (manifest -> README.md), ``writer`` (``write_report``: all of them, then
the files), ``cli`` (the command line; ``__main__`` runs it). Importing the package has no side effects.
"""

from pipeline.report.cli import main, run
from pipeline.report.common import ReportError
from pipeline.report.writer import write_report

__all__ = ["ReportError", "main", "run", "write_report"]
