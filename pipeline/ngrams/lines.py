"""Read the input: file paths -> raw lines (``ReadLines``)."""

from __future__ import annotations

import apache_beam as beam

from pipeline import progress


class _CountLines(beam.DoFn):
    """Counts the lines and their bytes (with their line end as the file has it: ``\\r\\n``, ``\\n`` or none at
    the file's end) for ``pipeline/progress.py``; passes them on without their line end, as Beam would strip it."""

    BATCH = 4096  # lines counted here before they go to progress.add (one call per line would cost more)

    def __init__(self, with_filename: bool, phase: str):
        self._with_filename = with_filename
        self._phase = phase

    def start_bundle(self):
        self._lines = self._bytes = 0
        progress.start_bundle()

    def process(self, element):
        line = element[1] if self._with_filename else element
        self._lines += 1
        self._bytes += len(line)
        if self._lines >= self.BATCH:
            progress.add(self._lines, self._bytes, phase=self._phase)
            self._lines = self._bytes = 0
        if line.endswith(b"\n"):  # Beam's line ends (strip_trailing_newlines): "\r\n" or "\n"
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        yield (element[0], line) if self._with_filename else line

    def finish_bundle(self):
        progress.add(self._lines, self._bytes, phase=self._phase)
        self._lines = self._bytes = 0
        progress.flush()


class ReadLines(beam.PTransform):
    """file paths -> raw lines (bytes, newline stripped), split into byte ranges so workers share big files.

    Lines are read as bytes and decoded by the consumers, so that a line that is not UTF-8 becomes a
    dead-letter record (see :class:`CorpusSummary`) rather than a crash. ``progress_phase``: what the read counts as
    in the job's progress line (``pipeline/progress.py``; a second read of the input is a phase of its own).
    """

    def __init__(self, *, split_bytes: int, with_filename: bool = False, progress_phase: str = progress.MAIN):
        super().__init__()
        self._split_bytes = split_bytes
        self._with_filename = with_filename
        self._phase = progress_phase

    def expand(self, paths):
        return (
            paths
            | "ReadAllFromText"
            >> beam.io.ReadAllFromText(
                desired_bundle_size=self._split_bytes,
                coder=beam.coders.BytesCoder(),
                with_filename=self._with_filename,
                strip_trailing_newlines=False,  # _CountLines counts each line's own end, then strips it
            )
            | "CountLines" >> beam.ParDo(_CountLines(self._with_filename, self._phase))
        )
