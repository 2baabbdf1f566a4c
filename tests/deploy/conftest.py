import pytest

from tests.deploy.chartlib import PROFILES, kserve_profile, render


def kserve_kind() -> str:
    """A predictor kind for the KServe profile: a registered one when there is one. PREDICTORS is empty until the
    first predictor lands; then "recommendation" stands in (test_chart_render registers it for the check only)."""
    from services.cli.serve import PREDICTORS

    return next(iter(PREDICTORS), "recommendation")


ALL_PROFILES = {**PROFILES, "kserve": kserve_profile(kserve_kind())}


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict]]:
    return {name: render(values) for name, values in ALL_PROFILES.items()}
