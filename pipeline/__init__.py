"""spanprep's Apache Beam jobs: raw corpus -> preprocessed-corpus artifact (see schemas/FORMAT.md)."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("spanprep")
except _metadata.PackageNotFoundError:  # running from a checkout without `pip install -e .`
    __version__ = "0.1.0"


def _quiet_beam_import_warning() -> None:
    """Beam logs 'apitools not found ...' on import when its GCP extras are absent; not our users' concern."""
    import logging

    class _Filter(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return "apitools not found" not in str(record.msg)

    logging.getLogger().addFilter(_Filter())


_quiet_beam_import_warning()


def configure_logging(level: int | None = None) -> None:
    """INFO-level progress lines on stderr for the command-line jobs, Beam's own chatter at WARNING.

    The handler looks ``sys.stderr`` up when it writes, so a job's ``main()`` called from a test
    (which swaps sys.stderr) never leaves a handler pointing at a closed stream.
    """
    import logging
    import sys

    class _StderrHandler(logging.StreamHandler):
        @property
        def stream(self):
            return sys.stderr

        @stream.setter
        def stream(self, _value):
            pass

    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if level is None else level, handlers=[handler], force=True)
    for noisy in ("apache_beam", "absl"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
