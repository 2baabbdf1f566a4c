"""Optional TLS and mTLS for gRPC: certificates from Settings; plaintext clients and clients without a certificate
are refused; the CLI's channel speaks TLS from PRAXON_TLS_* files."""
import datetime
import ipaddress

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from services.common.client import retrying_channel
from tests import harness


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject_key, subject: str, issuer_key, issuer: str, *, ca: bool, server: bool = False):
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
         .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
         .public_key(subject_key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                         x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                            critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _pem(obj) -> bytes:
    if hasattr(obj, "private_bytes"):
        return obj.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
    return obj.public_bytes(serialization.Encoding.PEM)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca_key = _key()
    ca = _cert(ca_key, "praxon-test-ca", ca_key, "praxon-test-ca", ca=True)
    srv_key, cli_key = _key(), _key()
    files = {"ca": ca, "server": _cert(srv_key, "praxon", ca_key, "praxon-test-ca", ca=False, server=True),
             "server_key": srv_key, "client": _cert(cli_key, "client", ca_key, "praxon-test-ca", ca=False),
             "client_key": cli_key}
    out = {}
    for name, obj in files.items():
        (d / f"{name}.pem").write_bytes(_pem(obj))
        out[name] = str(d / f"{name}.pem")
    return out


def _list(channel, token):
    return jobs_pb2_grpc.JobServiceStub(channel).ListJobs(jobs_pb2.ListJobsRequest(), metadata=harness.auth(token),
                                                          timeout=10)


def test_mtls_refuses_plaintext_and_certificate_less_clients(settings, tenants, pki, monkeypatch):
    secure = settings.model_copy(deep=True)
    secure.grpc.tls_cert_file, secure.grpc.tls_key_file = pki["server"], pki["server_key"]
    secure.grpc.tls_client_ca_file = pki["ca"]
    server = harness.PlatformServer(secure, ["platform"])
    token = tenants["a"][1]
    ca = open(pki["ca"], "rb").read()
    try:
        with grpc.insecure_channel(server.address) as plain:
            with pytest.raises(grpc.RpcError) as e:
                _list(plain, token)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        with grpc.secure_channel(server.address, grpc.ssl_channel_credentials(root_certificates=ca)) as anonymous:
            with pytest.raises(grpc.RpcError) as e:
                _list(anonymous, token)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        # the CLI's channel, configured from the environment as a user would
        monkeypatch.setenv("PRAXON_TLS_CA_FILE", pki["ca"])
        monkeypatch.setenv("PRAXON_TLS_CERT_FILE", pki["client"])
        monkeypatch.setenv("PRAXON_TLS_KEY_FILE", pki["client_key"])
        channel = retrying_channel(server.address, budget_s=5)
        try:
            _list(channel, token)
        finally:
            channel.close()
    finally:
        server.stop()


def test_tls_without_client_certificates(settings, tenants, pki):
    secure = settings.model_copy(deep=True)
    secure.grpc.tls_cert_file, secure.grpc.tls_key_file = pki["server"], pki["server_key"]
    server = harness.PlatformServer(secure, ["platform"])
    try:
        ca = open(pki["ca"], "rb").read()
        with grpc.secure_channel(server.address, grpc.ssl_channel_credentials(root_certificates=ca)) as channel:
            _list(channel, tenants["a"][1])
    finally:
        server.stop()
