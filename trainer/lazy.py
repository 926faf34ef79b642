"""A package's names imported on first use (PEP 562), so that a light submodule does not pull in the heavy ones.

``trainer.data``, ``trainer.masking`` and ``trainer.engine`` re-export their submodules' names; imported eagerly,
``import trainer.data.config`` (a dataclass) ran the package's ``__init__`` and imported torch with the loaders,
2-3 s before ``trainer/pretrain.py`` could even parse its command line (and DeepSpeed with ``trainer.engine``). With
:func:`exports` each name is imported from its submodule when it is first looked up, and kept.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def exports(package: str, names: dict[str, str], before: Callable[[], object] | None = None) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: ``names`` maps each exported name to ``"submodule"`` (the same name
    there) or ``"submodule:name"``; ``before`` runs once before the first submodule is imported this way."""
    namespace = importlib.import_module(package).__dict__
    done: list[bool] = []

    def __getattr__(name: str) -> Any:
        where = names.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if before is not None and not done:
            before()
            done.append(True)
        module, _, attribute = where.partition(":")
        value = getattr(importlib.import_module(f"{package}.{module}"), attribute or name)
        namespace[name] = value
        return value

    return __getattr__
