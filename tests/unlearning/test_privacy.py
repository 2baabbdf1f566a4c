import math

from hypothesis import given, settings
from hypothesis import strategies as st

from services.unlearning import privacy as P


def test_clopper_pearson_closed_form_and_consistency():
    for n in (10, 57, 500):
        assert math.isclose(P.clopper_pearson_upper(0, n, 0.05), 1 - 0.05 ** (1 / n), rel_tol=1e-12)
        table = P.clopper_pearson_upper_table(n, 0.05)
        for k in (1, n // 3, n - 1):
            hi = P.clopper_pearson_upper(k, n, 0.05)
            assert math.isclose(float(table[k]), hi, rel_tol=1e-9)
            # the defining equation: P(Bin(n, hi) <= k) = alpha, and hi > k/n
            assert math.isclose(P.binom_cdf(k, n, hi), 0.05, rel_tol=1e-6)
            assert hi > k / n
        assert P.clopper_pearson_upper(n, n, 0.05) == 1.0


@settings(max_examples=40, deadline=None)
@given(mu=st.floats(0.05, 4.0), delta=st.floats(1e-8, 0.2))
def test_gdp_epsilon_inverts_delta(mu, delta):
    eps = P.gdp_epsilon(delta, mu)
    if eps == 0.0:
        assert P.gdp_delta(0.0, mu) <= delta
    else:
        assert math.isclose(P.gdp_delta(eps, mu), delta, rel_tol=1e-6)


@settings(max_examples=30, deadline=None)
@given(eps=st.floats(0.05, 0.99), delta=st.floats(1e-9, 1e-2))
def test_analytic_sigma_is_no_larger_than_classical_below_one(eps, delta):
    # the classical calibration is valid (hence not tighter than the exact one) for eps < 1
    a, c = P.analytic_sigma(1.0, eps, delta), P.classical_sigma(1.0, eps, delta)
    assert a <= c * (1 + 1e-9)
    assert math.isclose(P.gdp_delta(eps, 1.0 / a), delta, rel_tol=1e-6)


def test_known_gdp_value():
    # 1-GDP at delta = 1e-5: eps ~ 4.38 (computed from the closed form by hand at eps = 4: 4.8e-5 > 1e-5)
    assert P.gdp_delta(4.0, 1.0) > 1e-5
    eps = P.gdp_epsilon(1e-5, 1.0)
    assert 4.0 < eps < 4.6
