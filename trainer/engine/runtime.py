"""What DeepSpeed reads from the environment when it is imported, decided here once, before it is imported.

Every module of the trainer that imports DeepSpeed imports this module before (at its top, or in the function
that imports DeepSpeed), and so does the first name looked up in ``trainer.engine`` (its ``__getattr__``); the
entry points' start-up checks import neither (``trainer/lazy.py``). Two defaults, each only when the user
has not set the variable:

- ``DS_ACCELERATOR=cpu`` when this machine has no accelerator. DeepSpeed's own detection ends on the CPU after
  trying CUDA and warns "Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect
  it." in every process (torch's PyPI build is a CUDA build that runs on the CPU when there is no device). With a
  CUDA, XPU or MPS device, or a DeepSpeed accelerator plug-in installed (Intel Extension for PyTorch, Ascend, Gaudi,
  ...), nothing is set and DeepSpeed detects it as before: a GPU machine still gets ``cuda``.
- ``TORCH_EXTENSIONS_DIR``: where DeepSpeed JIT-builds its C++ ops (on the CPU, its shared-memory all-reduce;
  75-160 s). torch's default, ``~/.cache/torch_extensions``, is shared by every checkout and virtual environment of
  the user, and one that finds the op built by another with other flags builds it again. The op depends on the
  environment's torch and DeepSpeed, so its cache goes with the environment: ``<checkout>/.cache/torch_extensions``
  when the environment is the checkout's own ``.venv`` (the directory ``make`` uses), else
  ``<sys.prefix>/.cache/torch_extensions``. When that directory cannot be made, torch's default stays. Rank 0 says where the ops go when it
  sets up DeepSpeed (:func:`extensions_notice`).
"""

from __future__ import annotations

import importlib.util
import os
import sys

# Packages that make DeepSpeed choose another accelerator than CUDA or the CPU (deepspeed/accelerator/
# real_accelerator.py): with one installed the choice is DeepSpeed's.
ACCELERATOR_PLUGINS = (
    "intel_extension_for_pytorch",
    "torch_npu",
    "habana_frameworks",
    "torch_mlu",
    "torch_sdaa",
    "torch_supa",
    "torch_xmlir",
)


def accelerator_present() -> bool:
    """Whether torch sees a CUDA, XPU or MPS device, or a DeepSpeed accelerator plug-in is installed."""
    import torch

    if torch.cuda.is_available():
        return True
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return True
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return True
    return any(importlib.util.find_spec(name) is not None for name in ACCELERATOR_PLUGINS)


def extensions_dir() -> str | None:
    """This environment's directory for torch's JIT-built extensions; None when it cannot be made."""
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    home = checkout if os.path.dirname(os.path.abspath(sys.prefix)) == checkout else sys.prefix
    directory = os.path.join(home, ".cache", "torch_extensions")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError:
        return None
    return directory


_defaulted_extensions_dir: str | None = None  # set by apply_defaults when it chose TORCH_EXTENSIONS_DIR


def apply_defaults(env: os._Environ | dict[str, str] = os.environ) -> None:
    """Set ``DS_ACCELERATOR`` and ``TORCH_EXTENSIONS_DIR`` in ``env`` when unset (see the module docstring)."""
    global _defaulted_extensions_dir
    if not env.get("DS_ACCELERATOR") and not accelerator_present():
        env["DS_ACCELERATOR"] = "cpu"
    if not env.get("TORCH_EXTENSIONS_DIR"):
        directory = extensions_dir()
        if directory is not None:
            env["TORCH_EXTENSIONS_DIR"] = _defaulted_extensions_dir = directory


def extensions_notice() -> str | None:
    """The line that says where DeepSpeed's ops go, when :func:`apply_defaults` chose the directory."""
    if _defaulted_extensions_dir is None:
        return None
    return (
        f"DeepSpeed's C++ ops are built once into {_defaulted_extensions_dir} (this environment's cache; "
        "TORCH_EXTENSIONS_DIR puts them elsewhere)"
    )


apply_defaults()
