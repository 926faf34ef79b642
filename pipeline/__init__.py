"""spanprep's Apache Beam jobs: raw corpus -> preprocessed-corpus artifact (see schemas/FORMAT.md)."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("spanprep")
except _metadata.PackageNotFoundError:  # running from a checkout without `pip install -e .`
    __version__ = "0.1.0"
