import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernels.decode_attention import decode_attention
from kernels.decode_attention.reference import decode_attention_naive
from tests.kernels.kernel_testing import DEVICE, DTYPES, assert_verbose_allclose, tol


def make(B, H, Hkv, M, D, Dv=None, dtype=torch.float32, seed=0, full=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, D, generator=g)
    k = torch.randn(B, Hkv, M, D, generator=g)
    v = torch.randn(B, Hkv, M, Dv or D, generator=g)
    lengths = torch.full((B, Hkv), M) if full else torch.randint(0, M + 1, (B, Hkv), generator=g)
    return [x.to(DEVICE, dtype) for x in (q, k, v)] + [lengths.to(DEVICE)]


@pytest.mark.parametrize("B,H,Hkv,M,D", [(1, 1, 1, 1, 8), (2, 4, 4, 7, 16), (3, 8, 2, 123, 64), (2, 6, 3, 300, 5),
                                         (1, 4, 1, 1030, 128)])
def test_reference_matches_naive(B, H, Hkv, M, D):
    q, k, v, lengths = make(B, H, Hkv, M, D, seed=M)
    out = decode_attention(q.cpu(), k.cpu(), v.cpu(), lengths.cpu(), backend="reference")
    assert_verbose_allclose(out, decode_attention_naive(q.cpu(), k.cpu(), v.cpu(), lengths.cpu()), atol=1e-5,
                            rtol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,H,Hkv,M,D,Dv", [(1, 1, 1, 1, 8, 8), (2, 4, 4, 7, 16, 16), (3, 8, 2, 123, 64, 32),
                                            (2, 6, 3, 300, 5, 7), (1, 4, 1, 1030, 128, 128)])
def test_triton_matches_reference(dtype, B, H, Hkv, M, D, Dv):
    q, k, v, lengths = make(B, H, Hkv, M, D, Dv, dtype=dtype, seed=M)
    lengths[0, 0] = M
    if B > 1:
        lengths[1, 0] = 0  # an empty head gives zeros
    out = decode_attention(q, k, v, lengths, backend="triton")
    ref = decode_attention(q, k, v, lengths, backend="reference")
    assert out.dtype == dtype and out.shape == (B, H, Dv)
    assert_verbose_allclose(out.float(), ref.float(), **tol(dtype, 10))
    if B > 1:
        assert out[1, : H // Hkv].eq(0).all()


def test_positions_beyond_length_are_ignored():
    q, k, v, lengths = make(2, 4, 2, 50, 16, seed=1)
    k2, v2 = k.clone(), v.clone()
    for b in range(2):
        for g in range(2):
            k2[b, g, lengths[b, g]:] = float("nan")
            v2[b, g, lengths[b, g]:] = 1e30
    for backend in ("reference", "triton"):
        a = decode_attention(q, k, v, lengths, backend=backend)
        b = decode_attention(q, k2, v2, lengths, backend=backend)
        assert torch.equal(a, b), backend


def test_split_counts_agree():
    from kernels.decode_attention.triton import decode_attention_triton

    q, k, v, lengths = make(2, 4, 2, 500, 32, seed=3)
    ref = decode_attention(q, k, v, lengths, backend="reference")
    for splits in (1, 3, 8):
        assert_verbose_allclose(decode_attention_triton(q, k, v, lengths, splits=splits), ref, atol=1e-5, rtol=1e-5)


def test_non_contiguous_cache_strides():
    q, k, v, lengths = make(2, 4, 2, 64, 16, seed=4)
    big_k = torch.zeros(2, 2, 80, 16, device=DEVICE)
    big_k[:, :, :64] = k
    kv = big_k[:, :, :64]  # padded capacity: stride(2) fine, M smaller than the allocation
    assert not kv.is_contiguous()
    assert_verbose_allclose(decode_attention(q, kv, v, lengths, backend="triton"),
                            decode_attention(q, k, v, lengths, backend="reference"), atol=1e-5, rtol=1e-5)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(B=st.integers(1, 3), Hkv=st.integers(1, 3), G=st.integers(1, 4), M=st.integers(1, 200),
       D=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_hypothesis_triton_vs_naive(B, Hkv, G, M, D, seed):
    q, k, v, lengths = make(B, Hkv * G, Hkv, M, D, seed=seed)
    out = decode_attention(q, k, v, lengths, backend="triton")
    assert_verbose_allclose(out, decode_attention_naive(q.cpu(), k.cpu(), v.cpu(), lengths.cpu()), atol=1e-5,
                            rtol=1e-5)


def test_bad_input():
    q, k, v, lengths = make(2, 4, 2, 10, 8, seed=0)
    cases = [
        (lambda: decode_attention(q, k[..., :7], v, lengths), "k_cache"),
        (lambda: decode_attention(q, k, v[:, :, :9], lengths), "v_cache"),
        (lambda: decode_attention(q, k[:, :1].expand(2, 3, 10, 8), v, lengths), "k_cache"),
        (lambda: decode_attention(q, k, v, lengths[:, :1]), "lengths"),
        (lambda: decode_attention(q, k, v, lengths + 100), "lengths"),
        (lambda: decode_attention(q, k, v, lengths - 100), "lengths"),
        (lambda: decode_attention(q, k, v, lengths.float()), "lengths"),
        (lambda: decode_attention(q.double(), k, v, lengths), "q"),
        (lambda: decode_attention(q, k.half(), v, lengths), "k_cache"),
        (lambda: decode_attention(q, k, v, lengths, scale=float("nan")), "scale"),
        (lambda: decode_attention(q, k, v, lengths.to("meta")), "lengths"),
        (lambda: decode_attention(q, k.transpose(-1, -2).contiguous().transpose(-1, -2), v, lengths,
                                  backend="triton"), "k_cache"),
    ]
    for fn, name in cases:
        with pytest.raises(ValueError, match=name):
            fn()
