"""tools/*.py scripts (not a package) imported by path for the tests of their pure parts."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def load_tool(stem: str, alias: str) -> ModuleType:
    """tools/<stem>.py executed as a fresh module named `alias` (a name of its own per test module,
    so one module's state cannot leak into another's)."""
    spec = importlib.util.spec_from_file_location(alias, TOOLS / f"{stem}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
