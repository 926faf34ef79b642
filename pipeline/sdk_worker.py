"""``pipeline.sdk_worker``: the FnApiRunner's local worker processes (``pipeline/runners/sdk_worker.py``)."""

from pipeline.runners.sdk_worker import main

if __name__ == "__main__":
    main()
