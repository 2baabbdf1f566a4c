"""Services never import each other: what one needs of another goes over gRPC, or through an adapter the other
publishes in its spec (ServiceSpec.model_adapters, found by services.catalog.model_adapter)."""
from __future__ import annotations

import ast
from pathlib import Path

from services import catalog

ROOT = Path(__file__).resolve().parents[2]
SERVICES = [s.name for s in catalog.SPECS if (ROOT / "services" / s.name).is_dir()]


def imported_services(path: Path) -> set[str]:
    """The services a module imports (at any depth: module level or inside a function)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
        if isinstance(node, ast.ImportFrom) and node.module == "services":
            names = [f"services.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if len(parts) > 1 and parts[0] == "services" and parts[1] in SERVICES:
                found.add(parts[1])
    return found


def test_no_service_imports_another():
    crossings = []
    for name in SERVICES:
        for path in (ROOT / "services" / name).rglob("*.py"):
            crossings += [f"{path.relative_to(ROOT)} imports services.{other}"
                          for other in sorted(imported_services(path) - {name})]
    assert crossings == []


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from services.moderation.guard import GuardModel\n    return GuardModel\n")
    assert imported_services(module) == {"moderation"}


def test_unlearning_finds_the_guard_heads_through_the_catalog():
    config = {"kind": "frozen_linear", "feature_spec": "minilm-l6-mean-l2norm+role-interaction+prompt-context/v2",
              "l2": 0.01, "feature_dim": 1538}
    adapter = catalog.model_adapter(config)
    assert adapter is not None and adapter.name == "guard_frozen_linear"
    assert catalog.model_adapter({"kind": "softmax_l2"}) is None
