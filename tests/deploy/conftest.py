import pytest

from tests.deploy.chartlib import PROFILES, kserve_profile, render


def kserve_kind() -> str:
    """A predictor kind for the KServe profile: the first one services/catalog.py declares."""
    from services import catalog

    return next(iter(catalog.predictors()))


ALL_PROFILES = {**PROFILES, "kserve": kserve_profile(kserve_kind())}


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict]]:
    return {name: render(values) for name, values in ALL_PROFILES.items()}
