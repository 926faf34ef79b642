"""``python -m pipeline.report``: see :mod:`pipeline.report.cli`."""

from pipeline.quick_exit import quick_exit
from pipeline.report.cli import main

quick_exit(main())
