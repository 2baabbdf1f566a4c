"""`python -m services.unlearning`: serve the unlearning service with the platform services
(the same as `praxon serve platform unlearning`; settings from PRAXON_* env vars)."""
from __future__ import annotations

import sys

from services.cli.main import main

if __name__ == "__main__":
    main(["serve", "platform", "unlearning", *sys.argv[1:]])
