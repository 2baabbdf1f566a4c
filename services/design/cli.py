"""`praxon design ...`: each part adds its commands under `praxon design <part>`; `praxon demo` runs each part's
demo step in turn. Imports no torch (the parts' cli modules import it only inside commands)."""
from __future__ import annotations

import importlib

from services.design import PARTS


def add_commands(sub, client_opts) -> None:
    p = sub.add_parser("design", help="scientific design: campaigns, crystals, guided flows")
    parts = p.add_subparsers(dest="part", required=True)
    for part in PARTS:
        importlib.import_module(f"services.design.{part}.cli").add_commands(parts, client_opts)


def demo(target) -> None:
    for part in PARTS:
        importlib.import_module(f"services.design.{part}.cli").demo(target)
