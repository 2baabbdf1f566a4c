import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels.topk_scores import topk_scores
from kernels.topk_scores.reference import topk_scores_naive, topk_scores_reference
from tests.kernels.kernel_testing import DEVICE, DTYPES, assert_verbose_allclose


def int_data(B, N, d, dtype=torch.float32, seed=0, lo=-2, hi=3):
    """Small-integer data: every score is exact in every dtype and summation order, with many ties."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(lo, hi, (B, d), generator=g).to(dtype)
    t = torch.randint(lo, hi, (N, d), generator=g).to(dtype)
    return q, t


def random_exclude(B, N, E, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-1, N, (B, E), generator=g)


# ---- reference vs float64 full product -----------------------------------------------------------------------
@pytest.mark.parametrize("N", [1, 7, 123, 4099])
@pytest.mark.parametrize("k", [1, 5, 64])
@pytest.mark.parametrize("with_exclude", [False, True])
def test_reference_matches_full_topk(N, k, with_exclude):
    k = min(k, N)
    q, t = int_data(5, N, 6, seed=N + k)
    ex = random_exclude(5, N, 4, seed=k) if with_exclude else None
    # a small chunk forces many merges, including ties straddling chunk and top-k boundaries
    s, i = topk_scores_reference(q, t, k, ex, chunk=max(k, 37))
    s64, i64 = topk_scores_naive(q, t, k, ex)
    assert torch.equal(i, i64)
    assert_verbose_allclose(s, s64, atol=0, rtol=0)


def test_reference_matches_torch_topk_on_gaussian_data():
    g = torch.Generator().manual_seed(1)
    q, t = torch.randn(4, 32, generator=g), torch.randn(5000, 32, generator=g)
    s, i = topk_scores_reference(q, t, 50, chunk=300)
    full = q.double() @ t.double().T
    vals, idx = torch.topk(full, 50, dim=1)
    assert torch.equal(i, idx)  # continuous data: no ties, so the order is unique
    assert_verbose_allclose(s, vals, atol=1e-5, rtol=1e-5)


def test_ties_go_to_lower_ids_and_exclusions_are_skipped():
    q = torch.ones(2, 3, device=DEVICE)
    t = torch.ones(10, 3, device=DEVICE)
    ex = torch.tensor([[2, 0, -1], [-1, -1, -1]], device=DEVICE)
    for backend in ("reference", "triton"):
        s, i = topk_scores(q, t, 4, ex, backend=backend)
        assert i.tolist() == [[1, 3, 4, 5], [0, 1, 2, 3]]
        assert s.eq(3.0).all()


def test_rows_with_too_few_items_are_padded():
    q, t = [x.to(DEVICE) for x in int_data(2, 6, 4, seed=3)]
    ex = torch.tensor([[0, 1, 2, 3, 4], [5, -1, -1, -1, -1]], device=DEVICE)
    for backend in ("reference", "triton"):
        s, i = topk_scores(q, t, 6, ex, backend=backend)
        assert i[0, 1:].eq(-1).all() and s[0, 1:].eq(float("-inf")).all()
        assert i[0, 0].item() == 5
        assert sorted(i[1, :5].tolist()) == [0, 1, 2, 3, 4] and i[1, 5].item() == -1


def test_nan_scores_rank_last_but_above_padding():
    q = torch.tensor([[1.0, 0.0]], device=DEVICE)
    t = torch.tensor([[float("nan"), 0.0], [2.0, 0.0], [-1.0, 0.0]], device=DEVICE)
    for backend in ("reference", "triton"):
        s, i = topk_scores(q, t, 3, backend=backend)
        assert i.tolist() == [[1, 2, 0]]
        assert s[0, 2].item() == torch.finfo(torch.float32).min


# ---- Triton vs reference --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,N,d,k", [(1, 1, 4, 1), (3, 7, 5, 7), (5, 123, 16, 10), (17, 300, 33, 64),
                                     (4, 4099, 24, 50), (2, 700, 8, 300)])
@pytest.mark.parametrize("with_exclude", [False, True])
def test_triton_matches_reference_exactly_on_integer_data(dtype, B, N, d, k, with_exclude):
    q, t = int_data(B, N, d, seed=B * N)
    q, t = q.to(DEVICE, dtype), t.to(DEVICE, dtype)
    ex = random_exclude(B, N, 9, seed=N).to(DEVICE) if with_exclude else None
    s_t, i_t = topk_scores(q, t, k, ex, backend="triton")
    s_r, i_r = topk_scores(q, t, k, ex, backend="reference")
    assert s_t.dtype == torch.float32 and i_t.dtype == torch.int64 and s_t.shape == (B, k)
    assert torch.equal(i_t.cpu(), i_r.cpu())
    assert_verbose_allclose(s_t, s_r, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_on_gaussian_data_returns_true_top_scores(dtype):
    g = torch.Generator().manual_seed(2)
    q = torch.randn(6, 40, generator=g).to(DEVICE, dtype)
    t = torch.randn(2000, 40, generator=g).to(DEVICE, dtype)
    s, i = topk_scores(q, t, 20, backend="triton")
    exact = q.double() @ t.double().T  # same rounded inputs, float64 product
    atol = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}[dtype]
    # reported scores are the true scores of the reported ids, in descending order ...
    assert_verbose_allclose(s, exact.gather(1, i), atol=atol, rtol=atol)
    assert (s[:, :-1] >= s[:, 1:]).all()
    # ... and they are the k best up to the accumulation tolerance
    assert_verbose_allclose(s, torch.topk(exact, 20, dim=1).values, atol=atol, rtol=atol)


def test_split_and_tile_boundaries():
    q, t = int_data(3, 1000, 7, seed=9)
    ref = topk_scores_reference(q, t, 33)
    from kernels.topk_scores.triton import topk_scores_triton

    for splits in (1, 3, 16):
        _, i = topk_scores_triton(q.to(DEVICE), t.to(DEVICE), 33, splits=splits)
        assert torch.equal(i.cpu(), ref[1])


def test_non_contiguous_inputs():
    q, t = [x.to(DEVICE) for x in int_data(4, 200, 12, seed=5)]
    t_nc = t.T.contiguous().T  # column-major table
    q_nc = torch.cat([q, q], dim=1)[:, ::2]
    assert not t_nc.is_contiguous() and not q_nc.is_contiguous()
    ref = topk_scores_naive(q_nc.cpu(), t_nc.cpu(), 9)
    for backend in ("reference", "triton"):
        _, i = topk_scores(q_nc, t_nc, 9, backend=backend)
        assert torch.equal(i.cpu(), ref[1])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(B=st.integers(1, 20), N=st.integers(1, 400), d=st.integers(1, 40), k_frac=st.floats(0, 1),
       E=st.integers(0, 6), seed=st.integers(0, 2**16))
def test_hypothesis_triton_and_reference_agree_with_naive(B, N, d, k_frac, E, seed):
    k = max(1, min(N, int(k_frac * min(N, 130))))
    q, t = int_data(B, N, d, seed=seed)
    ex = random_exclude(B, N, E, seed=seed) if E else None
    s64, i64 = topk_scores_naive(q, t, k, ex)
    for backend in ("reference", "triton"):
        s, i = topk_scores(q.to(DEVICE), t.to(DEVICE), k, None if ex is None else ex.to(DEVICE), backend=backend)
        assert torch.equal(i.cpu(), i64), backend
        assert_verbose_allclose(s, s64, atol=0, rtol=0)


# ---- validation -----------------------------------------------------------------------------------------------
def test_bad_input_raises_value_error_naming_the_argument():
    q, t = torch.randn(2, 4), torch.randn(10, 4)
    cases = [
        (lambda: topk_scores(q, torch.randn(10, 5), 3), "table"),
        (lambda: topk_scores(q, t, 11), "k"),
        (lambda: topk_scores(q, t, 0), "k"),
        (lambda: topk_scores(q, t, 2.5), "k"),
        (lambda: topk_scores(q.long(), t, 3), "queries"),
        (lambda: topk_scores(q, t.double(), 3), "table"),
        (lambda: topk_scores(q, t.half(), 3), "table"),
        (lambda: topk_scores(q[0], t, 3), "queries"),
        (lambda: topk_scores(q, t, 3, torch.zeros(2, 2, dtype=torch.int32)), "exclude"),
        (lambda: topk_scores(q, t, 3, torch.zeros(3, 2, dtype=torch.int64)), "exclude"),
        (lambda: topk_scores(q, t, 3, torch.full((2, 2), 10)), "exclude"),
        (lambda: topk_scores(q, t, 3, torch.full((2, 2), -2)), "exclude"),
        (lambda: topk_scores(q, t.to("meta"), 3), "table"),
        (lambda: topk_scores(q, t, 3, backend="cuda"), "backend"),
        (lambda: topk_scores(q, torch.randn(0, 4), 1), "table"),
        (lambda: topk_scores("q", t, 3), "queries"),
    ]
    for fn, name in cases:
        with pytest.raises(ValueError, match=name):
            fn()


def test_k_above_triton_limit():
    q, t = torch.randn(1, 4), torch.randn(1100, 4)
    with pytest.raises(ValueError, match="k="):
        topk_scores(q, t, 1025, backend="triton")
    _, i = topk_scores(q, t, 1025)  # auto on CPU: reference
    assert i.shape == (1, 1025)


def test_empty_batch():
    s, i = topk_scores(torch.randn(0, 4), torch.randn(10, 4), 3)
    assert s.shape == (0, 3) and i.shape == (0, 3)
