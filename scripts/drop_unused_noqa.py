"""Rewrite `# noqa: CODE - why` comments for rules the project's ruff config does not select into `# why`, keeping
the explanation (ruff's own RUF100 fix deletes the whole comment). Usage: drop_unused_noqa.py FILE... ; then
`ruff check --fix` removes what is left (noqa for selected rules that silence nothing)."""
from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOQA = re.compile(r"#\s*noqa:\s*(?P<codes>[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)(?P<rest>.*)$")


def selected_prefixes() -> tuple[str, ...]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    return tuple(config["select"])


def _letters(code: str) -> str:
    return re.match(r"[A-Z]+", code).group(0)


def selected(code: str, prefixes: tuple[str, ...]) -> bool:
    """Whether ruff would check `code` under `select` (B selects B023, not BLE001; BLE selects BLE001)."""
    return any(code.startswith(p) and _letters(code) == _letters(p) for p in prefixes)


def rewrite_line(line: str, prefixes: tuple[str, ...]) -> str:
    m = NOQA.search(line)
    if not m:
        return line
    codes = [c.strip() for c in m["codes"].split(",")]
    keep = [c for c in codes if selected(c, prefixes)]
    if keep == codes:
        return line
    rest = m["rest"].strip()
    why = rest.lstrip("-–:; ").strip()
    head = line[: m.start()].rstrip()
    if keep:
        return f"{head}  # noqa: {', '.join(keep)}{' - ' + why if why else ''}"
    return f"{head}  # {why}" if why else head


def main(paths: list[str]) -> int:
    prefixes = selected_prefixes()
    changed = 0
    for name in paths:
        path = Path(name)
        text = path.read_text()
        lines = text.split("\n")
        new = [rewrite_line(line, prefixes) for line in lines]
        if new != lines:
            path.write_text("\n".join(new))
            changed += 1
    print(f"rewrote {changed} file(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
