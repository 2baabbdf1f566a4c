"""Who can reach `praxon predictor`, from outside: the listening address (loopback by default outside a cluster,
`--host` otherwise), bearer auth with the tenant's API token over HTTP (tritonclient) and gRPC (raw calls, no
generated stubs), health/readiness open to probes, and `--tenant` by name. The predictor serves a popularity
recommender registered directly (no training), as two subprocesses on loopback."""
from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import uuid

import grpc
import numpy as np
import pytest
import tritonclient.http as th
from tritonclient.utils import InferenceServerException

from tests import harness

N_ITEMS = 12
PUBLIC_READY = "/inference.GRPCInferenceService/ServerReady"
METADATA = "/inference.GRPCInferenceService/ModelMetadata"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _register_popularity(settings, tenant_id: str) -> None:
    """"recommender" v1: a popularity model registered the way a job registers one (staged, numbered on commit)."""
    import torch

    from services.recommendation.model import ModelConfig
    from services.recommendation.recommender import MODEL_FORMAT, REGISTRY_KIND

    counts = torch.cat([torch.zeros(1), torch.arange(N_ITEMS, 0, -1).float()])  # item 1 most popular
    config = {"format": MODEL_FORMAT, "model_kind": "popularity",
              "model": ModelConfig(kind="popularity", n_items=N_ITEMS, dim=8).to_dict(),
              "item_ids": [f"m{i}" for i in range(N_ITEMS)], "seed": 0}
    harness.register_model(settings, tenant_id, "recommender", {"popularity": counts}, kind=REGISTRY_KIND,
                           config=config)


def _predictor_cmd(tenant: str, http: int, grpc_port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "services.cli.main", "predictor", "recommendation", "--tenant", tenant,
            "--model", "recommender:1", "--http-port", str(http), "--grpc-port", str(grpc_port), *extra]


def _env(settings, **extra) -> dict[str, str]:
    env = {**os.environ, **harness.settings_env(settings), "PYTHONPATH": str(harness.ROOT), "OMP_NUM_THREADS": "1",
           **extra}
    if "KUBERNETES_SERVICE_HOST" not in extra:
        env.pop("KUBERNETES_SERVICE_HOST", None)
    return env


class Served:
    def __init__(self, proc, log, http: int, grpc_port: int):
        self.proc, self.log, self.http, self.grpc = proc, log, http, grpc_port

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(self.log.read_text()[-3000:])
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", self.http)) != 0:
                return False
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.grpc)) == 0


@pytest.fixture(scope="module")
def served(settings, tmp_path_factory):
    """Tenant A (by name) owns the model; B is another tenant. "default": no --host, no --require-token, outside a
    cluster. "cluster": KUBERNETES_SERVICE_HOST set (as in a pod), with --host 127.0.0.1."""
    from services.common.embedded import spawn

    suffix = uuid.uuid4().hex[:6]
    name_a = f"pred-a-{suffix}"
    tenant_a, token_a = harness.token_for(settings, name_a)
    _, token_b = harness.token_for(settings, f"pred-b-{suffix}")
    _register_popularity(settings, tenant_a)
    logs = tmp_path_factory.mktemp("predictors")
    procs = {}
    try:
        for key, extra, env in (("default", (), _env(settings)),
                                ("cluster", ("--host", "127.0.0.1"),
                                 _env(settings, KUBERNETES_SERVICE_HOST="10.0.0.1"))):
            http, grpc_port = _free_port(), _free_port()
            log = logs / f"{key}.log"
            tenant = name_a if key == "default" else tenant_a  # by name and by id
            procs[key] = Served(spawn(_predictor_cmd(tenant, http, grpc_port, *extra), log, env=env), log, http,
                                grpc_port)
        for p in procs.values():
            harness.wait_for(p.ready, timeout=120, interval=0.3, what="the predictor")
        yield {"a": token_a, "b": token_b, **procs}
    finally:
        for p in procs.values():
            p.proc.terminate()
        for p in procs.values():
            p.proc.wait(20)


# ---------------------------------------------------------------------------------------------- listening address
def _listening(port: int) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Local addresses of the sockets listening (state 0A) on a port, from /proc/net/tcp and tcp6 (IPv4-mapped
    IPv6 addresses, which gRPC's core uses for an IPv4 host, as IPv4)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                local, state = line.split()[1], line.split()[3]
                addr, _, hex_port = local.partition(":")
                if state != "0A" or int(hex_port, 16) != port:
                    continue
                raw = bytes.fromhex(addr)  # 32-bit words in host (little-endian) order
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                ip = ipaddress.ip_address(raw)
                found.add(ip.ipv4_mapped if ip.version == 6 and ip.ipv4_mapped else ip)
    return found


LOOPBACK = {ipaddress.ip_address("127.0.0.1")}


def test_outside_a_cluster_both_servers_listen_on_loopback_only(served):
    for port in (served["default"].http, served["default"].grpc):
        assert _listening(port) == LOOPBACK, port  # not 0.0.0.0 nor [::]


def test_host_sets_the_address_of_both_servers(served):
    p = served["cluster"]
    for port in (p.http, p.grpc):
        assert _listening(port) == LOOPBACK, port
    client = th.InferenceServerClient(f"127.0.0.1:{p.http}")
    try:
        assert client.is_server_ready()
        # in a cluster no token is required by default (the mesh / a NetworkPolicy guards the pod)
        assert [i["name"] for i in client.get_model_metadata("recommendation")["inputs"]] == [
            "history", "k", "exclude_seen"]
    finally:
        client.close()


def test_predictor_defaults():
    from services.cli.serve import predictor_defaults

    assert predictor_defaults(None, None, cluster=False) == ("127.0.0.1", True)
    assert predictor_defaults(None, None, cluster=True) == ("0.0.0.0", False)
    assert predictor_defaults("::1", False, cluster=False) == ("::1", False)
    assert predictor_defaults("127.0.0.1", True, cluster=True) == ("127.0.0.1", True)


# ---------------------------------------------------------------------------------------------- bearer auth
def _infer(port: int, token: str | None):
    client = th.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        inp = th.InferInput("history", [1, 2], "INT64")
        inp.set_data_from_numpy(np.array([[1, 2]], dtype=np.int64))
        k = th.InferInput("k", [1], "INT32")
        k.set_data_from_numpy(np.array([3], dtype=np.int32))
        ex = th.InferInput("exclude_seen", [1], "BOOL")
        ex.set_data_from_numpy(np.array([True]))
        headers = {"Authorization": f"Bearer {token}"} if token else None
        return client.infer("recommendation", [inp, k, ex], headers=headers).as_numpy("item_index").tolist()
    finally:
        client.close()


@pytest.mark.parametrize("who", [None, "b", "garbage"])
def test_http_refuses_requests_without_the_tenants_token(served, who):
    token = {None: None, "b": served["b"], "garbage": "prx_not-a-token"}[who]
    with pytest.raises(InferenceServerException) as err:
        _infer(served["default"].http, token)
    assert err.value.status() == "401", err.value


def test_http_answers_with_the_tenants_token_and_health_stays_open(served):
    # the three most popular items but the two in the history
    assert _infer(served["default"].http, served["a"]) == [[3, 4, 5]]
    client = th.InferenceServerClient(f"127.0.0.1:{served['default'].http}")
    try:
        assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("recommendation")
        with pytest.raises(InferenceServerException) as err:
            client.get_model_metadata("recommendation")  # metadata is not health: token needed
        assert err.value.status() == "401"
    finally:
        client.close()


def _raw(port: int, method: str, payload: bytes, token: str | None):
    """A gRPC call with hand-encoded bytes (no generated OIP stubs)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = ch.unary_unary(method, request_serializer=None, response_deserializer=None)
        md = [("authorization", f"Bearer {token}")] if token else None
        return call(payload, metadata=md, timeout=30)


def test_grpc_refuses_requests_without_the_tenants_token(served):
    port = served["default"].grpc
    metadata_request = b"\x0a" + bytes([len("recommendation")]) + b"recommendation"  # ModelMetadataRequest.name
    assert _raw(port, PUBLIC_READY, b"", None) == b"\x08\x01"  # ServerReadyResponse(ready=true), no token
    for token in (None, served["b"], "prx_not-a-token"):
        with pytest.raises(grpc.RpcError) as err:
            _raw(port, METADATA, metadata_request, token)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, token
    answer = _raw(port, METADATA, metadata_request, served["a"])
    assert b"recommendation" in answer and b"history" in answer and b"item_index" in answer


# ---------------------------------------------------------------------------------------------- --tenant
@pytest.mark.parametrize("tenant", ["no-such-tenant", str(uuid.UUID(int=7))])
def test_an_unknown_tenant_is_one_line_and_exit_status_2(settings, tenant):
    out = subprocess.run(_predictor_cmd(tenant, _free_port(), _free_port()), env=_env(settings),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert lines == [f"error: --tenant: no tenant has the id or name {tenant!r}"], out.stderr[-2000:]
