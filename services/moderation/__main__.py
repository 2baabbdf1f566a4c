"""`python -m services.moderation [--max-wait-ms 2] [--batch-workers 0] ...`: serve ModerationService alone
(platform settings from PRAXON_* environment variables; the serving knobs of serving.ServingConfig from flags).
`praxon serve moderation` does the same with the default knobs; `praxon serve` hosts it with every other service."""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging


def main(argv: list[str] | None = None) -> None:
    from services.moderation.serving import ServingConfig  # noqa: PLC0415

    p = argparse.ArgumentParser(prog="python -m services.moderation", description=__doc__)
    for f in dataclasses.fields(ServingConfig):
        p.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default)
    args = p.parse_args(argv)
    config = ServingConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ServingConfig)})

    from services.cli.serve import serve  # noqa: PLC0415
    from services.common import db  # noqa: PLC0415
    from services.common.server import build_app_context  # noqa: PLC0415
    from services.common.settings import Settings  # noqa: PLC0415

    settings = Settings()
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    db.ensure_database(settings)
    db.migrate(settings)
    app = build_app_context(settings)
    app.extras["moderation_config"] = config
    asyncio.run(serve(settings, ["moderation"], app=app))


if __name__ == "__main__":
    main()
