"""Serving the console: `run_console(address, host, port)` binds the port (0: a free one), says the URL on stdout,
and serves with uvicorn until SIGTERM/SIGINT."""
from __future__ import annotations

import ipaddress
import socket
import sys

DEFAULT_PORT = 8600


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def bind(host: str, port: int) -> socket.socket:
    """The listening socket (bound here, so port 0 gives a port the URL can name before serving starts)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise SystemExit(f"error: cannot listen on {host}:{port} (the console, --port): {exc.strerror}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def run_console(address: str, host: str = "127.0.0.1", port: int = DEFAULT_PORT, *,
                service_addresses: dict[str, str] | None = None, secure_cookies: bool = False) -> None:
    """Serve the console for the platform at `address` until stopped. A host other than loopback is said to be
    one (a token typed into the page travels in clear unless a TLS proxy is in front)."""
    import uvicorn

    from services.console.app import create_app

    sock = bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    print(f"praxon console on http://{shown}:{bound}/ for the platform at {address} (Ctrl-C stops it)", flush=True)
    if not is_loopback(host) and not secure_cookies:
        print("warning: the console listens beyond loopback without --secure-cookies: put it behind TLS",
              file=sys.stderr, flush=True)
    app = create_app(address, service_addresses=service_addresses, secure_cookies=secure_cookies)
    config = uvicorn.Config(app, log_level="warning",
                            access_log=False, proxy_headers=False, lifespan="off", timeout_graceful_shutdown=2)
    uvicorn.Server(config).run(sockets=[sock])
