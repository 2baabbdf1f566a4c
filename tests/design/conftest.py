"""Shared by the design service's tests (gameopt, crystals, flows): the platform fixtures come from tests/conftest.py.
Torch runs on one thread here, so seeded results do not depend on the machine's core count."""
import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)
