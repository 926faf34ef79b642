"""How a message writes one of spanprep's commands so that the user can run it as printed.

A bare ``python -m pipeline.verify ...`` runs whatever ``python`` comes first on ``PATH``: outside an activated venv
one without the project's packages, and the hint ends in a traceback. So every printed hint names the interpreter
that runs this process, as the user can type it: relative to the working directory when it lies inside it
(``.venv/bin/python`` from the checkout's root), else its absolute path. The path is the one the interpreter was
started by (a venv's ``bin/python``), never a resolved symbolic link, which would leave the venv.
"""

from __future__ import annotations

import os
import shlex
import sys


def program(path: str) -> str:
    """``path`` as a shell word, relative to the working directory when it lies inside it."""
    path = os.path.abspath(path)
    cwd = os.getcwd()
    if path.startswith(cwd.rstrip(os.sep) + os.sep):
        path = os.path.relpath(path, cwd)
    return shlex.quote(path)


def python() -> str:
    """This process's interpreter as a shell word (:func:`program`)."""
    return program(sys.executable or "python")


def module(name: str) -> str:
    """``<python> -m <name>``: how to run one of the project's modules with this interpreter."""
    return f"{python()} -m {name}"
