"""praxon's shared GPU kernel library: one folder per op, each ``reference.py`` (pure torch: the spec, the CPU path,
the benchmark baseline), ``triton.py`` (kernels + launchers) and ``__init__.py`` (the public op: validates, then
dispatches CUDA tensors to Triton and everything else to the reference; ``backend=`` forces either).

    from kernels.topk_scores import topk_scores            # fused scores + running top-k over a large table
    from kernels.kv_cache import kv_budget, kv_budget_qk, kv_compress   # VL-Cache budgets and compression
    from kernels.decode_attention import decode_attention  # one decode step over a variable-length cache
    from kernels.pairwise_kernel import pairwise_kernel    # ARD RBF / Matern-5/2 covariance (+ d/d lengthscales)
    from kernels.preferdiff_loss import preferdiff_loss    # PreferDiff loss, fused forward and backward

Nothing is imported here, so ``import kernels`` stays cheap and needs neither triton nor a GPU (the ops import triton
lazily, only on the Triton path). This package imports nothing of the project but torch/triton. Not to be confused
with Hugging Face's unrelated ``kernels`` distribution: this one ships inside the ``praxon`` distribution.
"""
