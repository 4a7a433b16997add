"""planc from Python: check, solve, simulate and emit parallel training plans.

Each function takes a plan file (its imports are read relative to it) or, with ``text=``,
the plan's text (imports relative to the working directory, or to ``path`` when given as
its name), and returns a dict: ``check`` the report contract that ``planc check --format
json`` prints (docs/spec/report.md), ``solve`` what ``planc solve --format json`` prints,
``simulate`` and ``emit`` what their commands show (docs/guide/python.md). ``set`` changes
attributes without editing the file, as ``--set`` does: a list of ``"PATH=VALUE"`` strings
or a dict ``{"parallel.tp": 4}``.

A plan with errors comes back with ``"ok": False`` and its ``"diagnostics"``; what the
command line refuses as misuse raises: ``OSError`` for a plan that cannot be read,
``FileExistsError`` for a file ``emit`` would replace without ``force=True``,
``ValueError`` for an unknown target or setting.
"""

import json
import os
from typing import Any, Dict, Iterable, Mapping, Optional, Union

from . import _planc

__version__ = _planc.__version__
__all__ = ["check", "check_text", "solve", "simulate", "emit", "__version__"]

Path = Union[str, "os.PathLike[str]"]
Settings = Union[Iterable[str], Mapping[str, Any], None]

_TEXT = "<text>"


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def _sets(set: Settings) -> list:
    if set is None:
        return []
    if isinstance(set, Mapping):
        return [f"{k}={_value(v)}" for k, v in set.items()]
    if isinstance(set, str):
        raise ValueError("set= takes a list of 'PATH=VALUE' strings or a dict, not one string")
    return [str(s) for s in set]


def _plan(path: Optional[Path], text: Optional[str]) -> str:
    if path is None:
        if text is None:
            raise ValueError("give a plan file, or its text with text=")
        return _TEXT
    return os.fspath(path)


def check(path: Path, *, set: Settings = None) -> Dict[str, Any]:
    """Check the plan at ``path``: the report contract as a dict (``report["ok"]``)."""
    return json.loads(_planc.check(os.fspath(path), None, _sets(set)))


def check_text(text: str, *, name: str = _TEXT, set: Settings = None) -> Dict[str, Any]:
    """Check plan text: the report contract as a dict; diagnostics name the text ``name``."""
    return json.loads(_planc.check(name, text, _sets(set)))


def solve(
    path: Optional[Path] = None,
    *,
    text: Optional[str] = None,
    set: Settings = None,
    top: Optional[int] = None,
) -> Dict[str, Any]:
    """Fill the plan's holes: the best plan's report (``best``), the ranked ``candidates``
    (``top`` of them, the plan's ``search.top`` by default), the ``pareto`` front and the
    ``search``'s counts."""
    return json.loads(_planc.solve(_plan(path, text), text, _sets(set), top))


def simulate(
    path: Optional[Path] = None,
    *,
    text: Optional[str] = None,
    set: Settings = None,
    svg: bool = False,
    trace: bool = False,
) -> Dict[str, Any]:
    """Simulate one step event by event: the ``report`` and the ``simulation`` (the busiest
    rank's split and every pipeline rank's); ``svg=True`` adds the timeline as SVG text,
    ``trace=True`` the Chrome trace (ui.perfetto.dev) as a dict."""
    return json.loads(_planc.simulate(_plan(path, text), text, _sets(set), svg, trace))


def emit(
    path: Optional[Path] = None,
    target: str = "",
    *,
    text: Optional[str] = None,
    set: Settings = None,
    out: Optional[Path] = None,
    force: bool = False,
) -> Dict[str, Any]:
    """The launch artifacts for ``target`` (megatron, deepspeed, torchrun, torchtitan,
    slurm, k8s) as ``artifacts`` (path, contents, executable); with ``out`` they are also
    written there (``written``), never over an existing file unless ``force=True``."""
    out = None if out is None else os.fspath(out)
    return json.loads(_planc.emit(_plan(path, text), target, text, _sets(set), out, force))
