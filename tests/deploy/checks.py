"""Checks over rendered manifests. Each returns a list of problems (empty = fine), so tests can also show that a
check fails on a manifest that is wrong."""
from __future__ import annotations

import argparse
import contextlib
import io

import yaml

from tests.deploy.chartlib import (
    CHART,
    Container,
    by_kind,
    container_env,
    containers,
    fullname,
    must_set_env_names,
    secret_env_names,
    secret_values,
    settings_env_names,
    settings_for,
)

REGENERATE = "run `.venv/bin/python helm/tools/gen_schema.py` and commit helm/praxon/catalog.yaml and values.schema.json"


# ------------------------------------------------------------------------------------------------ code <-> chart
def parse_cli(args: list[str]) -> tuple[argparse.Namespace | None, str]:
    from services.cli.main import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser().parse_args(args), ""
    except SystemExit:
        return None, err.getvalue().strip().splitlines()[-1] if err.getvalue() else "invalid arguments"


def check_commands(docs: list[dict]) -> list[str]:
    """Every praxon container runs a `praxon` subcommand that exists, for services/queues/predictors that exist."""
    from services import catalog

    SERVICES, QUEUES, PREDICTORS = catalog.names(), catalog.queues(), catalog.predictors()

    problems = []
    for c in containers(docs):
        if not c.is_praxon or c.kind == "runtime":  # runtimes are checked merged into each InferenceService
            continue
        if c.spec.get("command"):
            problems.append(f"{c.where}: sets `command`; the image's entrypoint is `praxon`, set only args")
        ns, err = parse_cli(c.args)
        if ns is None:
            problems.append(f"{c.where}: `praxon {' '.join(c.args)}` is not a valid command: {err}")
            continue
        expected = {"service": "serve", "worker": "worker", "migrations": "migrate", "predictor": "predictor"}
        if ns.command != expected.get(c.kind):
            problems.append(f"{c.where}: a {c.kind} runs `praxon {ns.command}`, expected `praxon {expected.get(c.kind)}`")
        if ns.command == "serve":
            if not ns.services:
                problems.append(f"{c.where}: `praxon serve` without a service name hosts every service")
            for s in ns.services:
                if s not in SERVICES:
                    problems.append(f"{c.where}: service {s!r} is not a service of services/catalog.py "
                                    f"({', '.join(SERVICES)})")
        if ns.command == "worker":
            queues = ns.queues.split(",") if ns.queues != "all" else list(QUEUES)
            for q in queues:
                if q not in QUEUES:
                    problems.append(f"{c.where}: queue {q!r} is not a queue of any job kind in services/catalog.py "
                                    f"({', '.join(QUEUES)})")
        if ns.command == "predictor" and ns.name not in PREDICTORS:
            problems.append(f"{c.where}: predictor {ns.name!r} is not a predictor of services/catalog.py "
                            f"({', '.join(PREDICTORS) or 'none registered yet'})")
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            cmd = c.spec.get(probe, {}).get("exec", {}).get("command")
            if cmd:
                if cmd[0] != "praxon":
                    problems.append(f"{c.where}: {probe} runs {cmd[0]!r}; praxon probes must run the `praxon` CLI")
                else:
                    pns, perr = parse_cli(cmd[1:])
                    if pns is None:
                        problems.append(f"{c.where}: {probe} runs `{' '.join(cmd)}`, not a praxon command: {perr}")
    return problems


def check_env(docs: list[dict]) -> list[str]:
    """Env names the chart sets are Settings fields; required ones are set; secrets come from Secrets; the values
    validate as Settings."""
    valid = settings_env_names()
    secret_names = secret_env_names()
    must = must_set_env_names()
    problems = []
    for c in containers(docs):
        if not c.is_praxon:
            continue
        env, origin = container_env(c, docs)
        for name in env:
            if name.upper().startswith("PRAXON") and name not in valid:
                close = [v for v in valid if v.replace("_", "") == name.upper().replace("_", "")]
                hint = f" (did you mean {close[0]}?)" if close else ""
                problems.append(f"{c.where}: sets {name} ({origin[name]}), which no Settings field reads{hint}")
        for name in sorted(must - set(env)):
            problems.append(f"{c.where}: does not set {name}; its default only works on a developer machine")
        for name in sorted(secret_names & set(env)):
            if not origin[name].startswith("secret "):
                problems.append(f"{c.where}: {name} is a SecretStr setting but comes from {origin[name]}, "
                                "not a Secret")
        try:
            settings_for(env)
        except Exception as exc:  # noqa: BLE001 - report pydantic's message
            problems.append(f"{c.where}: its environment does not validate as Settings: {exc}")
    return problems


def check_ports(docs: list[dict]) -> list[str]:
    """Container ports, probes and Services agree with the Settings each process builds, and the CLI defaults."""
    from services.cli.main import build_parser

    problems = []
    for c in containers(docs):
        if not c.is_praxon:
            continue
        ports = {p.get("name"): p["containerPort"] for p in c.spec.get("ports", [])}
        if c.kind == "service":
            st = settings_for(container_env(c, docs)[0])
            if ports.get("grpc") != st.grpc.port:
                problems.append(f"{c.where}: port 'grpc' is {ports.get('grpc')}, the process listens on "
                                f"PRAXON_GRPC__PORT={st.grpc.port}")
            if ports.get("metrics") != st.metrics_port:
                problems.append(f"{c.where}: port 'metrics' is {ports.get('metrics')}, the process serves "
                                f"metrics on PRAXON_METRICS_PORT={st.metrics_port}")
            if st.grpc.host in ("127.0.0.1", "localhost", "::1"):
                problems.append(f"{c.where}: PRAXON_GRPC__HOST={st.grpc.host} is unreachable from other pods")
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                if st.grpc.tls_cert_file:  # kubelet gRPC probes speak plaintext only: a TCP probe of the port
                    port = c.spec.get(probe, {}).get("tcpSocket", {}).get("port")
                    if port not in ("grpc", st.grpc.port):
                        problems.append(f"{c.where}: serves TLS, so {probe} must be a tcpSocket probe on "
                                        f"{st.grpc.port} (got {port})")
                    continue
                port = c.spec.get(probe, {}).get("grpc", {}).get("port")
                if port != st.grpc.port:
                    problems.append(f"{c.where}: {probe} is not a gRPC probe on {st.grpc.port} (got {port})")
        if c.kind == "predictor":
            ns = build_parser().parse_args(c.args)
            if ports.get("http1") != ns.http_port:
                problems.append(f"{c.where}: port 'http1' is {ports.get('http1')}, `praxon predictor` "
                                f"serves HTTP on --http-port {ns.http_port}")
            for probe in ("livenessProbe", "readinessProbe"):
                port = c.spec.get(probe, {}).get("httpGet", {}).get("port")
                if port != ns.http_port:
                    problems.append(f"{c.where}: {probe} port {port} != --http-port {ns.http_port}")
    # Services route to named container ports that exist on the pods they select
    pods = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    for svc in by_kind(docs, "Service"):
        sel = svc["spec"]["selector"]
        targets = [p for p in pods if sel.items() <= p["spec"]["template"]["metadata"]["labels"].items()]
        if not targets:
            problems.append(f"Service/{svc['metadata']['name']}: selects no pod")
        for p in targets:
            names = {cp.get("name") for c in p["spec"]["template"]["spec"]["containers"] for cp in c.get("ports", [])}
            nums = {cp["containerPort"] for c in p["spec"]["template"]["spec"]["containers"]
                    for cp in c.get("ports", [])}
            for sp in svc["spec"]["ports"]:
                t = sp.get("targetPort", sp["port"])
                if (isinstance(t, str) and t not in names) or (isinstance(t, int) and t not in nums):
                    problems.append(f"Service/{svc['metadata']['name']}: targetPort {t!r} is not a port of "
                                    f"{p['kind']}/{p['metadata']['name']}")
    return problems


def check_coverage(values: dict, docs: list[dict]) -> list[str]:
    """The chart deploys what services/catalog.py declares: its catalog.yaml lists every service and queue of the
    code and nothing else (it is generated); every enabled one (serviceDefaults / workerDefaults, then its entry)
    has a Deployment; every per-service or per-queue entry names one that exists."""
    from services import catalog

    SERVICES, QUEUES = catalog.names(), catalog.queues()
    listed = yaml.safe_load((CHART / "catalog.yaml").read_text())
    problems = []
    deployments = {d["metadata"]["name"]: d for d in by_kind(docs, "Deployment")}
    for what, code, chart in (("service", SERVICES, listed["services"]), ("queue", QUEUES, listed["queues"])):
        for name in code:
            if name not in chart:
                problems.append(f"{what} {name!r} is in services/catalog.py but not in helm/praxon/catalog.yaml: "
                                + REGENERATE)
        for name in chart:
            if name not in code:
                problems.append(f"helm/praxon/catalog.yaml lists {what} {name!r}, which services/catalog.py does not "
                                "declare: " + REGENERATE)
    for name in listed["services"]:
        entry = {**values.get("serviceDefaults", {}), **(values.get("services", {}).get(name) or {})}
        if entry.get("enabled") and f"{fullname()}-{name}" not in deployments:
            problems.append(f"service {name!r} is enabled but no Deployment {fullname()}-{name} was rendered")
    for q in listed["queues"]:
        entry = {**values.get("workerDefaults", {}), **(values.get("workers", {}).get(q) or {})}
        if entry.get("enabled") and f"{fullname()}-worker-{q}" not in deployments:
            problems.append(f"queue {q!r} is enabled but no Deployment {fullname()}-worker-{q} was rendered")
    for name in values.get("services", {}):
        if name not in SERVICES:
            problems.append(f"chart entry services.{name} is not a service of services/catalog.py "
                            f"({', '.join(SERVICES)}): remove it or register the service")
    for q in values.get("workers", {}):
        if q not in QUEUES:
            problems.append(f"chart entry workers.{q} is not a queue of any job kind in services/catalog.py")
    return problems


# ------------------------------------------------------------------------------------------------ policies
def _effective(c: Container, key: str):
    sc = c.spec.get("securityContext") or {}
    if key in sc:
        return sc[key]
    return (c.pod.get("securityContext") or {}).get(key)


def check_security(docs: list[dict]) -> list[str]:
    problems = []
    for c in containers(docs):
        if _effective(c, "runAsNonRoot") is not True:
            problems.append(f"{c.where}: runAsNonRoot is not true")
        uid = _effective(c, "runAsUser")
        if uid is None or uid == 0:
            problems.append(f"{c.where}: runAsUser is {uid!r}; set a non-zero UID")
        sc = c.spec.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{c.where}: allowPrivilegeEscalation is not false")
        if sc.get("privileged"):
            problems.append(f"{c.where}: privileged")
        if "ALL" not in (sc.get("capabilities") or {}).get("drop", []):
            problems.append(f"{c.where}: does not drop ALL capabilities")
    return problems


def check_resources(docs: list[dict]) -> list[str]:
    problems = []
    for c in containers(docs):
        res = c.spec.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for key in ("cpu", "memory"):
            if key not in req:
                problems.append(f"{c.where}: no {key} request")
        if "memory" not in lim:
            problems.append(f"{c.where}: no memory limit")
        gpus = {k: v for k, v in lim.items() if "gpu" in k}
        if gpus and not str(c.spec.get("image", "")).split(":")[-1].endswith("-cuda") and "@" not in c.spec.get(
                "image", ""):
            problems.append(f"{c.where}: requests {gpus} but runs the CPU image {c.spec.get('image')}")
    return problems


def check_probes(docs: list[dict]) -> list[str]:
    """Long-running servers (services, predictors, stores): liveness + readiness. Workers: none is required
    (a Celery worker serves no port and praxon has no worker health command yet; see helm/praxon/README.md);
    a given one must be valid (check_commands). Jobs: no probes; bounded by activeDeadlineSeconds/backoffLimit."""
    problems = []
    for c in containers(docs):
        if c.kind in ("service", "runtime", "predictor", "store"):
            for probe in ("livenessProbe", "readinessProbe"):
                if not c.spec.get(probe):
                    problems.append(f"{c.where}: no {probe}")
        if c.kind == "service" and not c.spec.get("startupProbe"):
            problems.append(f"{c.where}: no startupProbe (startup runs migrations and creates the bucket)")
    for job in by_kind(docs, "Job"):
        for key in ("activeDeadlineSeconds", "backoffLimit"):
            if key not in job["spec"]:
                problems.append(f"Job/{job['metadata']['name']}: no {key}")
    return problems


def check_images(docs: list[dict]) -> list[str]:
    problems = []
    for c in containers(docs):
        image = c.spec.get("image", "")
        if "@sha256:" in image:
            continue
        name, _, tag = image.rpartition(":")
        if not name or "/" in tag or not tag:
            problems.append(f"{c.where}: image {image!r} has no tag")
        elif tag == "latest":
            problems.append(f"{c.where}: image {image!r} uses the tag 'latest'")
    return problems


def check_secrets_stay_secret(docs: list[dict]) -> list[str]:
    """No value of a rendered Secret appears in a ConfigMap, a plain env value, an annotation or a label."""
    secrets = {v for v in secret_values(docs).values() if len(v) >= 8}
    problems = []
    for cm in by_kind(docs, "ConfigMap"):
        for k, v in (cm.get("data") or {}).items():
            for s in secrets:
                if s in str(v):
                    problems.append(f"ConfigMap/{cm['metadata']['name']} key {k} contains a Secret value")
    for c in containers(docs):
        for e in c.spec.get("env", []):
            if "value" in e and any(s in str(e["value"]) for s in secrets):
                problems.append(f"{c.where}: env {e['name']} has a Secret value in plain text")
        if any(s in a for s in secrets for a in c.spec.get("args", [])):
            problems.append(f"{c.where}: args contain a Secret value")
    for d in docs:
        meta = d["metadata"]
        for field in ("annotations", "labels"):
            for k, v in (meta.get(field) or {}).items():
                if any(s in str(v) for s in secrets):
                    problems.append(f"{d['kind']}/{meta['name']}: {field} {k} contains a Secret value")
    return problems


POLICIES = [check_security, check_resources, check_probes, check_images, check_secrets_stay_secret]
CONSISTENCY = [check_commands, check_env, check_ports]
