"""The design service's servicers: each part registers its own (services.design.<part>.api:register)."""
from __future__ import annotations

import grpc

from services.common.server import AppContext
from services.common.spec import resolve
from services.design import PARTS


def register(server: grpc.aio.Server, app: AppContext) -> list[str]:
    names: list[str] = []
    for part in PARTS:
        names += resolve(f"services.design.{part}.api:register")(server, app)
    return names
