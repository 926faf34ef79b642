"""``.venv/bin/python -m pipeline.report``: see :mod:`pipeline.report.cli`."""

from pipeline.report.cli import main
from schemas.quick_exit import quick_exit

quick_exit(main())
