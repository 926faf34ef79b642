"""``.venv/bin/python -m pipeline.worker_pool --service_port PORT``: the worker pool of ``--environment_type EXTERNAL``
(``pipeline/runners/worker_pool.py``)."""

from pipeline.runners.worker_pool import main

if __name__ == "__main__":
    main()
