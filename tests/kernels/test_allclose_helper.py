import pytest
import torch

from tests.kernels.kernel_testing import assert_verbose_allclose


def test_reports_count_and_location():
    a = torch.zeros(3, 4)
    b = a.clone()
    b[1, 2] = 1.0
    b[2, 3] = float("nan")
    with pytest.raises(AssertionError) as err:
        assert_verbose_allclose(a, b)
    msg = str(err.value)
    assert "2 / 12 elements differ" in msg and "(1, 2)" in msg and "NaN mismatches 1" in msg


def test_passes_within_tolerance_and_checks_shape():
    a = torch.ones(5)
    assert_verbose_allclose(a + 1e-7, a)
    with pytest.raises(AssertionError, match="shape"):
        assert_verbose_allclose(a, torch.ones(6))
