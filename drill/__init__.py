"""llm-drill: chaos and fault-injection drills for GPU LLM serving stacks.

The engine lives in this package; the fault library in :mod:`faults`; plugins
(faults, targets, trace sources, checks) see only :mod:`drill.api`.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("llm-drill")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
