"""``python -m pipeline.report``: see :mod:`pipeline.report.cli`."""

import sys

from pipeline.report.cli import main

sys.exit(main())
