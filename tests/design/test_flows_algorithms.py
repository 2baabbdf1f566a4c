"""OC-Flow and its special cases, the analytic mixture flow, EFM and SO(3) flows, without services: the properties
in shared/algorithms/design.md (zero control = the plain sampler, adjoint = autograd = finite differences, reward up
while on support, lambda orders deviation and gain, SO(3) iterates stay rotations, EFM matches the tilted target)."""
from __future__ import annotations


import pytest
import torch

from services.design.flows import geometry as so3
from services.design.flows import guidance as G
from services.design.flows import training as T
from services.design.flows.mixture import builtin_gmm2d
from services.design.flows.models import AnalyticGMMFlow, SO3VelocityMLP, VelocityMLP
from services.design.flows.rewards import Reward, Term

D64 = torch.float64


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def gmm_flow() -> AnalyticGMMFlow:
    return AnalyticGMMFlow(builtin_gmm2d(D64))


def distance_reward(target, weight=1.0, geometry="euclidean", dim=2) -> Reward:
    return Reward(geometry, dim, [Term("distance", weight, torch.tensor(target, dtype=D64))])


def mmd(x: torch.Tensor, y: torch.Tensor, bw: float = 1.0) -> float:
    """Biased squared MMD with a Gaussian kernel."""
    def k(a, b):
        return torch.exp(-torch.cdist(a, b) ** 2 / (2 * bw ** 2)).mean()
    return float(k(x, x) + k(y, y) - 2 * k(x, y))


# ---------------------------------------------------------------------------------------------- analytic flow
def test_analytic_velocity_transports_the_prior_to_the_mixture():
    mix = builtin_gmm2d(D64)
    g = torch.Generator().manual_seed(0)
    z0 = torch.randn(1000, 2, generator=g, dtype=D64)
    x = G.sample_plain(AnalyticGMMFlow(mix), z0, 100)
    exact = mix.sample(1000, g)
    assert mmd(x, exact) < 0.01 < mmd(z0, exact)
    # the velocity is E[x1 - x0 | x_t]: check at one time by Monte Carlo regression on a fine bin
    t = 0.6
    x1, x0 = mix.sample(200_000, g), torch.randn(200_000, 2, generator=g, dtype=D64)
    xt = t * x1 + (1 - t) * x0
    near = (xt - torch.tensor([2.0, 1.0], dtype=D64)).norm(dim=1) < 0.1
    mc = (x1 - x0)[near].mean(0)
    exact_v = mix.velocity(xt[near], t).mean(0)
    assert torch.allclose(mc, exact_v, atol=0.15)


def test_tilted_mixture_is_p_times_exp_minus_beta_energy():
    mix = builtin_gmm2d(D64)
    c, beta = torch.tensor([3.0, 1.0], dtype=D64), 0.7
    q = mix.tilted(c, beta)
    x = torch.randn(50, 2, dtype=D64) * 3
    diff = q.log_prob(x) - (mix.log_prob(x) - beta * T.quadratic_energy(x, c))
    assert torch.allclose(diff, diff[0].expand_as(diff), atol=1e-9)  # equal up to the constant log Z


# --------------------------------------------------------------------------------------- sampler and adjoint
@pytest.mark.parametrize("make", [gmm_flow, lambda: VelocityMLP(2, 32, 2).double()])
def test_zero_control_reproduces_the_plain_sampler_exactly(make):
    flow = make()
    z0 = torch.randn(64, 2, dtype=D64, generator=torch.Generator().manual_seed(3))
    ts = G.time_grid(25, D64)
    plain = G.sample_plain(flow, z0, 25)  # torchdiffeq's Euler
    controlled = G.simulate(flow, z0, torch.zeros(25, 64, 2, dtype=D64), ts)[-1]
    assert torch.equal(plain, controlled)
    guide = G.EuclideanGuide(flow, distance_reward([1.0, 1.0]), z0, steps=25, lam=1.0, lr=0.1, method="oc_flow")
    assert torch.equal(guide.samples(), plain)  # before any iteration the guide is the plain sampler


def _central_fd(fn, u: torch.Tensor, idx: list[tuple], eps: float = 1e-5) -> torch.Tensor:
    out = []
    for i in idx:
        up, dn = u.clone(), u.clone()
        up[i] += eps
        dn[i] -= eps
        out.append((fn(up) - fn(dn)) / (2 * eps))
    return torch.stack(out)


@pytest.mark.parametrize("lam", [0.0, 0.7])
def test_adjoint_gradient_matches_autograd_and_finite_differences(lam):
    torch.manual_seed(0)
    flow = VelocityMLP(3, 32, 2).double()
    reward = Reward("euclidean", 3, [Term("distance", 1.0, torch.tensor([0.5, -1.0, 2.0], dtype=D64)),
                                     Term("log_density", 0.5, torch.tensor([1.0, 0, 0, -1, 0, 1], dtype=D64), 0.8)])
    steps, n = 12, 5
    ts = G.time_grid(steps, D64)
    z0 = torch.randn(n, 3, dtype=D64)
    u = 0.3 * torch.randn(steps, n, 3, dtype=D64)
    traj = G.simulate(flow, z0, u, ts)
    grads, _ = G.adjoint(flow, reward, traj, u, ts, lam)
    ur = u.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(G.objective(flow, reward, z0, ur, ts, lam), ur)
    assert torch.allclose(grads, auto, atol=1e-10, rtol=1e-8)
    idx = [(0, 0, 0), (3, 2, 1), (7, 4, 2), (11, 1, 0)]
    fd = _central_fd(lambda uu: G.objective(flow, reward, z0, uu, ts, lam).detach(), u, idx)
    assert torch.allclose(torch.stack([grads[i] for i in idx]), fd, atol=1e-4, rtol=1e-4)


def test_so3_adjoint_gradient_matches_autograd_and_finite_differences():
    torch.manual_seed(1)
    flow = SO3VelocityMLP(32, 2).double()
    target = torch.tensor([0.2, -0.4, 0.1, 0.9], dtype=D64)
    reward = distance_reward(target.tolist(), geometry="so3", dim=3)
    steps, n, lam = 10, 4, 0.5
    ts = G.time_grid(steps, D64)
    R0 = so3.uniform(n, torch.Generator().manual_seed(2))
    u = 0.3 * torch.randn(steps, n, 3, dtype=D64)
    traj = G.so3_simulate(flow, R0, u, ts)
    grads = G.so3_adjoint(flow, reward, traj, u, ts, lam)
    ur = u.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(G.so3_objective(flow, reward, R0, ur, ts, lam), ur)
    assert torch.allclose(grads, auto, atol=1e-10, rtol=1e-8)
    idx = [(0, 0, 0), (4, 1, 2), (9, 3, 1)]
    fd = _central_fd(lambda uu: G.so3_objective(flow, reward, R0, uu, ts, lam).detach(), u, idx)
    assert torch.allclose(torch.stack([grads[i] for i in idx]), fd, atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------------------------------ guidance behaviour
def _guide(flow, z0, lam, method="oc_flow", iterations=40, lr=0.1, steps=20):
    reward = distance_reward([4.0, 0.0])
    guide = G.EuclideanGuide(flow, reward, z0, steps=steps, lam=lam, lr=lr, method=method)
    for _ in range(iterations):
        guide.iterate()
    return guide, reward


def test_oc_flow_raises_the_reward_and_stays_on_the_mixture_support():
    flow = gmm_flow()
    z0 = torch.randn(192, 2, dtype=D64, generator=torch.Generator().manual_seed(1))
    plain = G.sample_plain(flow, z0, 20)
    threshold = flow.log_prob(plain).quantile(0.05)
    guide, reward = _guide(flow, z0, lam=0.05)
    x = guide.samples()
    assert reward(x).mean() > reward(plain).mean() + 10
    assert (flow.log_prob(x) >= threshold).double().mean() >= 0.95


def test_larger_lambda_gives_smaller_deviation_and_smaller_gain():
    flow = gmm_flow()
    z0 = torch.randn(128, 2, dtype=D64, generator=torch.Generator().manual_seed(2))
    plain = G.sample_plain(flow, z0, 20)
    rows = []
    for lam in (0.3, 2.0, 8.0):
        guide, reward = _guide(flow, z0, lam=lam, iterations=25)
        x = guide.samples()
        rows.append(((x - plain).norm(dim=1).mean().item(), (reward(x) - reward(plain)).mean().item()))
    devs, gains = zip(*rows, strict=True)
    assert devs[0] > devs[1] > devs[2] > 0 and gains[0] > gains[1] > gains[2] > 0


@pytest.mark.parametrize("method", ["d_flow", "flowgrad"])
def test_special_cases_raise_the_reward(method):
    flow = gmm_flow()
    z0 = torch.randn(64, 2, dtype=D64, generator=torch.Generator().manual_seed(4))
    plain = G.sample_plain(flow, z0, 20)
    guide, reward = _guide(flow, z0, lam=0.0 if method == "flowgrad" else 0.05, method=method, iterations=15)
    assert reward(guide.samples()).mean() > reward(plain).mean() + 5
    if method == "d_flow":
        assert torch.equal(guide.u, torch.zeros_like(guide.u))  # only the start moved
        assert not torch.equal(guide.z0, z0)


def test_flowgrad_is_oc_flow_without_the_decay():
    """FlowGrad ignores the control cost: at lambda = 0.7 it takes exactly OC-Flow's steps at lambda = 0, while
    OC-Flow at 0.7 (decay 1 - lr lambda) ends elsewhere."""
    flow = gmm_flow()
    z0 = torch.randn(16, 2, dtype=D64, generator=torch.Generator().manual_seed(5))
    free, _ = _guide(flow, z0, lam=0.0, method="oc_flow", iterations=3)
    flowgrad, _ = _guide(flow, z0, lam=0.7, method="flowgrad", iterations=3)
    costly, _ = _guide(flow, z0, lam=0.7, method="oc_flow", iterations=3)
    assert torch.equal(flowgrad.u, free.u) and torch.equal(flowgrad.samples(), free.samples())
    assert (costly.u - free.u).abs().max() > 1e-3
    assert costly.control_cost() < free.control_cost()
    # the same on SO(3) (up to rounding: the SO(3) adjoint returns the cost's gradient with the reward's)
    torch.manual_seed(0)
    rot = SO3VelocityMLP(16, 2).double()
    R0 = so3.uniform(8, torch.Generator().manual_seed(6))
    reward = distance_reward([0.0, 0.0, 0.38268343, 0.92387953], geometry="so3", dim=3)
    guides = {}
    for name, lam, method in (("free", 0.0, "oc_flow"), ("flowgrad", 0.7, "flowgrad"), ("costly", 0.7, "oc_flow")):
        guides[name] = G.SO3Guide(rot, reward, R0, steps=8, lam=lam, lr=0.2, method=method)
        for _ in range(3):
            guides[name].iterate()
    assert torch.allclose(guides["flowgrad"].u, guides["free"].u, atol=1e-10, rtol=0)
    assert (guides["costly"].u - guides["free"].u).abs().max() > 1e-3


@pytest.mark.parametrize("method", ["oc_flow", "flowgrad", "d_flow"])
def test_so3_iterates_stay_rotations(method):
    torch.manual_seed(0)
    flow = SO3VelocityMLP(32, 2).double()
    R0 = so3.uniform(64, torch.Generator().manual_seed(1))
    reward = distance_reward([0.0, 0.0, 0.38268343, 0.92387953], geometry="so3", dim=3)
    seen = []
    lam = 0.0 if method == "flowgrad" else 0.1
    guide = G.SO3Guide(flow, reward, R0, steps=20, lam=lam, lr=0.2, method=method, on_iterate=seen.extend)
    before = reward(guide.samples()).mean()
    for _ in range(8):
        guide.iterate()
    seen.extend(guide.trajectory())
    assert len(seen) == 9 * 21  # every iterate's whole trajectory (D-Flow's included), and the final one
    for R in seen:
        assert so3.orthogonality_error(R) < 1e-6
        assert (torch.linalg.det(R) - 1).abs().max() < 1e-6
    assert reward(guide.samples()).mean() > before + 0.5
    if method == "d_flow":
        assert torch.equal(guide.u, torch.zeros_like(guide.u)) and not torch.equal(seen[0], seen[-21])


# --------------------------------------------------------------------------------------------------- training
def _train(model, loss_fn, steps, lr=3e-3):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for i in range(steps):
        g = torch.Generator().manual_seed(i)
        loss = loss_fn(g)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def test_efm_samples_match_the_tilted_target_better_than_the_unguided_flow():
    torch.manual_seed(0)
    mix = builtin_gmm2d(torch.float32)
    data = mix.sample(4096, torch.Generator().manual_seed(1))
    c, beta = torch.tensor([4.0, 0.0]), 0.5
    q = mix.tilted(c, beta)
    model = VelocityMLP(2, 64, 3)

    def efm(g):
        x1 = data[torch.randint(0, len(data), (512,), generator=g)]
        return T.efm_loss(model, x1, g, T.quadratic_energy(x1, c), beta)
    _train(model, efm, 600)
    z0 = torch.randn(1000, 2, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        x_efm = G.sample_plain(model, z0, 50)
    x_plain = G.sample_plain(AnalyticGMMFlow(mix), z0, 50)  # the unguided prior flow
    target = q.sample(1000, torch.Generator().manual_seed(3))
    ref = mmd(q.sample(1000, torch.Generator().manual_seed(4)), target)  # two samples of q: the noise floor
    m_efm, m_plain = mmd(x_efm, target), mmd(x_plain, target)
    assert m_efm < 0.25 * m_plain
    assert m_efm < ref + 0.02  # stated bound: within 0.02 of the q-vs-q MMD^2


def test_so3_efm_samples_match_the_tilted_target_better_than_the_unguided_flow():
    """EFM on SO(3): the geodesic flow-matching loss weighted by exp(-beta E(R1)), E(R) = ||R - C||_F^2 / 2, against
    q ~ p exp(-beta E), sampled exactly enough by importance resampling 100000 draws of p. Stated bound: MMD^2
    (Gaussian kernel on the rotation matrices) within 0.02 of two q samples' and below 0.1x the unweighted flow's;
    the mean energy within 0.1 of q's (measured over seeds 0-2: MMD^2 0.003-0.006 vs 0.31-0.34 unweighted)."""
    C = T.so3_centres()[1] @ so3.exp(torch.tensor([0.3, 0.0, 0.0], dtype=D64))
    beta = 2.0
    data = T.so3_mixture_data(2048, torch.Generator().manual_seed(0)).float()
    flows = {}
    for name in ("efm", "cfm"):
        torch.manual_seed(0)
        model = SO3VelocityMLP(64, 3)

        def loss(g, model=model, name=name):
            x1 = data[torch.randint(0, len(data), (256,), generator=g)]
            if name == "efm":
                return T.so3_efm_loss(model, x1, g, T.so3_quadratic_energy(x1, C.float()), beta)
            return T.so3_cfm_loss(model, x1, g)
        flows[name] = _train(model, loss, 400).double()
    R0 = so3.uniform(600, torch.Generator().manual_seed(10))
    with torch.no_grad():
        x = {k: G.so3_simulate(f, R0, None, G.time_grid(30, D64))[-1] for k, f in flows.items()}
    big = T.so3_mixture_data(100_000, torch.Generator().manual_seed(99))
    w = torch.softmax(-beta * T.so3_quadratic_energy(big, C), 0)
    gq = torch.Generator().manual_seed(7)
    q1, q2 = (big[torch.multinomial(w, 600, replacement=True, generator=gq)] for _ in range(2))
    m_efm, m_cfm, ref = mmd(x["efm"].flatten(1), q1.flatten(1)), mmd(x["cfm"].flatten(1), q1.flatten(1)), \
        mmd(q2.flatten(1), q1.flatten(1))
    assert m_efm < 0.1 * m_cfm and m_efm < ref + 0.02
    energy = {k: float(T.so3_quadratic_energy(v, C).mean()) for k, v in x.items()}
    assert abs(energy["efm"] - float(T.so3_quadratic_energy(q1, C).mean())) < 0.1 < energy["cfm"] - energy["efm"]
    assert so3.orthogonality_error(x["efm"]) < 1e-6


def test_so3_flow_matching_learns_the_rotation_mixture():
    torch.manual_seed(0)
    data = T.so3_mixture_data(2048, torch.Generator().manual_seed(0)).float()
    model = SO3VelocityMLP(64, 3)

    def loss(g):
        return T.so3_cfm_loss(model, data[torch.randint(0, len(data), (256,), generator=g)], g)
    _train(model, loss, 400)
    R0 = so3.uniform(300, torch.Generator().manual_seed(5))
    flow = model.double()
    with torch.no_grad():
        R = G.so3_simulate(flow, R0, None, G.time_grid(30, D64))[-1]
    centres = T.so3_centres()
    d_model = G.so3_nn_distance(R, centres).median()
    d_prior = G.so3_nn_distance(R0, centres).median()
    assert so3.orthogonality_error(R) < 1e-6
    assert d_model < 0.5 * d_prior


class _NoDensity(torch.nn.Module):
    """The analytic flow without its closed-form density: log-density by the change of variables only."""

    def __init__(self, flow):
        super().__init__()
        self.flow = flow

    def forward(self, x, t):
        return self.flow(x, t)


def test_change_of_variables_log_density_matches_the_exact_mixture_density():
    flow = gmm_flow()
    x = builtin_gmm2d(D64).sample(200, torch.Generator().manual_seed(7))
    exact = G.flow_log_density(flow, x, 100)
    assert torch.equal(exact, flow.log_prob(x))
    approx = G.flow_log_density(_NoDensity(flow), x, 200)
    assert (approx - exact).abs().median() < 0.1
    assert torch.corrcoef(torch.stack([approx, exact]))[0, 1] > 0.98
