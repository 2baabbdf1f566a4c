"""Generate Python code for every .proto under protos/ into the same folders (committed).
`--check` regenerates into a temporary folder and fails if the committed code drifted."""
from __future__ import annotations

import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

import grpc_tools
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent / "protos"
WELL_KNOWN = Path(grpc_tools.__file__).parent / "_proto"


def generate(out: Path) -> list[Path]:
    protos = sorted(ROOT.glob("praxon/**/*.proto"))
    args = ["protoc", f"-I{ROOT}", f"-I{WELL_KNOWN}", f"--python_out={out}", f"--pyi_out={out}",
            f"--grpc_python_out={out}", *[str(p.relative_to(ROOT)) for p in protos]]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    # Packages: every folder on the way to a generated module.
    for d in {p.parent for p in out.glob("praxon/**/*.py")}:
        while d != out:
            (d / "__init__.py").touch()
            d = d.parent
    return sorted(p.relative_to(out) for p in out.glob("praxon/**/*") if p.suffix in (".py", ".pyi"))


def main() -> None:
    if "--check" in sys.argv:
        with tempfile.TemporaryDirectory() as tmp:
            files = generate(Path(tmp))
            drift = [str(f) for f in files if not (ROOT / f).exists() or not filecmp.cmp(Path(tmp) / f, ROOT / f, False)]
            committed = {p.relative_to(ROOT) for p in ROOT.glob("praxon/**/*") if p.suffix in (".py", ".pyi")}
            drift += [f"{f} (no longer generated)" for f in committed - set(files)]
            if drift:
                raise SystemExit("generated code drifted from protos (run `make protos`):\n  " + "\n  ".join(drift))
            print(f"protos: {len(files)} generated files match")
        return
    with tempfile.TemporaryDirectory() as tmp:
        for f in generate(Path(tmp)):
            (ROOT / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(tmp) / f, ROOT / f)
    print("protos generated")


if __name__ == "__main__":
    main()
