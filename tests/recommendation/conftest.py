import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """These models are tiny: on shared CPUs, torch's intra-op threads only add contention. Restored afterwards.
    Also seeds torch's global RNG, so a test that draws without its own generator is still reproducible."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)  # every test starts from the same global RNG state: no unseeded draw
    yield
    torch.set_num_threads(n)
