"""Print the pinned requirements of one optional extra of pyproject.toml (one per line), for installs that must
bypass dependency resolution (`pip install --no-deps $(scripts/extra_pin.py ml100k)`), so the pin lives in one
place. --check-file PATH: instead, exit non-zero unless PATH (relative to site-packages) is installed."""
from __future__ import annotations

import argparse
import sys
import sysconfig
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def pins(extra: str) -> list[str]:
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    if extra not in extras:
        raise SystemExit(f"no optional extra {extra!r} in {PYPROJECT}; known: {', '.join(sorted(extras))}")
    return list(extras[extra])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("extra")
    p.add_argument("--check-file", help="a file the extra installs, relative to site-packages")
    args = p.parse_args(argv)
    requirements = pins(args.extra)
    if args.check_file:
        path = Path(sysconfig.get_paths()["purelib"]) / args.check_file
        if not path.is_file():
            print(f"{args.extra} ({', '.join(requirements)}) did not install {path}", file=sys.stderr)
            return 1
        return 0
    print("\n".join(requirements))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
