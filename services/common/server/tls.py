"""TLS for the gRPC server from the settings' PEM files."""
from __future__ import annotations

from pathlib import Path

import grpc


def server_credentials(g) -> grpc.ServerCredentials:
    """TLS from the settings' PEM files; with a client CA, mTLS (a client without a certificate it signed is
    refused during the handshake)."""
    if not g.tls_key_file:
        raise ValueError("PRAXON_GRPC__TLS_CERT_FILE needs PRAXON_GRPC__TLS_KEY_FILE")
    ca = Path(g.tls_client_ca_file).read_bytes() if g.tls_client_ca_file else None
    return grpc.ssl_server_credentials([(Path(g.tls_key_file).read_bytes(), Path(g.tls_cert_file).read_bytes())],
                                       root_certificates=ca, require_client_auth=ca is not None)

