"""What assistant hooks and turn observers import (a stable path for their authors).

The values live in `hostd.core.hook_api`; the machinery that calls hooks and observers is
`hostd.shell.hooks`. The entry point group for observers is "hostd.hooks".
"""

from hostd.core.hook_api import (
    Continue,
    Delegate,
    ErrorInfo,
    Finish,
    HookContext,
    StepPrep,
    TurnInfo,
    UpdateOptions,
)
from hostd.shell.hooks import ObserverChain, TurnObserver

__all__ = [
    "Continue",
    "Delegate",
    "ErrorInfo",
    "Finish",
    "HookContext",
    "ObserverChain",
    "StepPrep",
    "TurnInfo",
    "TurnObserver",
    "UpdateOptions",
]
