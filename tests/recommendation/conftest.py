import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """These models are tiny: on shared CPUs, torch's intra-op threads only add contention. Restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
