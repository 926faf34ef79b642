"""Where a job finds Beam's Prism runner (``--runner PrismRunner``) when ``--prism_location`` is not given.

Beam looks for the binary of its own version in its cache (``~/.apache_beam/cache/prism/bin``) and otherwise downloads
it from the Beam release on GitHub. Where that download is not possible (no network, as on this project's test
machines), the binary ``make prism`` builds with Go from the Go module of the same Beam version, into this checkout's
``.cache/prism/v<version>/prism``, is used instead (:func:`checkout_binary`; ``SPANPREP_PRISM_CACHE`` names another
directory in place of ``.cache/prism``, e.g. one several checkouts share). Importing this module imports no Beam.
"""

from __future__ import annotations

import os
from pathlib import Path

PRISM_MODULE = "github.com/apache/beam/sdks/v2/go/cmd/prism"  # what `make prism` builds (go install MODULE@vVERSION)
CHECKOUT = Path(__file__).resolve().parents[2]


def beam_version() -> str:
    from apache_beam.version import __version__

    return __version__


def checkout_binary(version: str | None = None) -> Path:
    """The path ``make prism`` writes Prism of Beam ``version`` (the installed Beam's by default) to; it may not
    exist."""
    cache = Path(os.environ.get("SPANPREP_PRISM_CACHE") or CHECKOUT / ".cache" / "prism")
    return cache / f"v{version or beam_version()}" / "prism"


def built_binary() -> Path | None:
    """:func:`checkout_binary` when ``make prism`` has built it (an executable file), else None."""
    path = checkout_binary()
    return path if path.is_file() and path.stat().st_mode & 0o111 else None
