"""``.venv/bin/python -m pipeline.verify ARTIFACT [--quick]`` (``pipeline.verify.artifact``)."""

from pipeline.verify.artifact import main
from schemas.quick_exit import quick_exit

quick_exit(main())
