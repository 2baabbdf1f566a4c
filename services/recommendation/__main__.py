"""`python -m services.recommendation`: serve RecommendationService with the platform services (the same as
`praxon serve platform recommendation`; settings from PRAXON_* env vars)."""
from __future__ import annotations

import sys

from services.cli.main import main

if __name__ == "__main__":
    main(["serve", "platform", "recommendation", *sys.argv[1:]])
