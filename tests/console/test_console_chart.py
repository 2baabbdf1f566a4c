"""The chart's console entry: off by default; on, a Deployment and a Service that validate against the Kubernetes
schemas, pass the chart's pod policies (non-root, resources, probes, pinned image), run a valid `praxon console`
that calls each enabled service by its Service, and carry no database, broker or object-store settings."""
from __future__ import annotations

from tests.deploy import checks
from tests.deploy.chartlib import PROFILES, containers, deep_merge, fullname, render, strip
from tests.deploy.validators import validate_all

ON = {"console": {"enabled": True}}


def _console_docs(docs: list[dict]) -> list[dict]:
    return [d for d in docs if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "console"]


def test_off_by_default():
    assert _console_docs(render({})) == []


def test_on_it_is_a_valid_client_of_the_services():
    docs = _console_docs(render(deep_merge(PROFILES["minimal"], ON)))
    assert sorted(d["kind"] for d in docs) == ["Deployment", "Service"]
    assert validate_all([strip(d) for d in docs], ["1.29.0"]) == []
    problems = []
    for check in checks.POLICIES:
        problems += check(docs)
    assert problems == []

    (c,) = containers(docs)
    ns, err = checks.parse_cli(c.args)
    assert ns is not None and ns.command == "console", err
    name = fullname()
    assert ns.address == f"{name}-platform:50051" and ns.host == "0.0.0.0" and ns.secure_cookies
    assert sorted(ns.service_address) == [f"design={name}-design:50051", f"unlearning={name}-unlearning:50051"]
    assert [p["containerPort"] for p in c.spec["ports"]] == [ns.port]
    assert not any(e["name"].startswith("PRAXON_") for e in c.spec.get("env", []))  # no store settings at all
    assert "envFrom" not in c.spec


def test_a_disabled_service_is_not_addressed():
    values = deep_merge(PROFILES["minimal"], {**ON, "services": {"design": {"enabled": False}}})
    (c,) = containers(_console_docs(render(values)))
    ns, _ = checks.parse_cli(c.args)
    assert [a.split("=")[0] for a in ns.service_address] == ["unlearning"]
