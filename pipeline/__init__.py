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
