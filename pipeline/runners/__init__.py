"""The code that starts and watches Beam's runners for the jobs: the jobs' shared convention (``jobs``), the runner
checks made before a job starts (``runner_checks``), the local SDK worker process (``sdk_worker``), the worker pool
of ``--environment_type EXTERNAL`` (``worker_pool``), Prism's binary (``prism``) and what a lost worker does to a job
(``lost_workers``). The modules ``pipeline.sdk_worker`` and ``pipeline.worker_pool`` stay as entry points."""
