"""`praxon design gameopt campaign create|list|get|observe|suggest|suggestions|report`, and the demo step (an
oracle campaign for a few rounds, with a progress bar per suggestion job and the best-so-far table). A plain client
of DesignService; imports no torch."""
from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (imported where used, so that `praxon --help` loads no grpc)
    from praxon.design.v1 import design_pb2 as pb, design_pb2_grpc
    from services.common.client import Target

# enum values by name (protobuf takes the names; the contracts are imported where used)
SOLVERS = {"hedge": "EQUILIBRIUM_SOLVER_HEDGE", "best_response": "EQUILIBRIUM_SOLVER_BEST_RESPONSE"}
KERNELS = {"onehot": "KERNEL_ONE_HOT_RBF", "categorical": "KERNEL_CATEGORICAL"}
ORACLES = {"ehrlich": "ORACLE_KIND_EHRLICH", "exhaustive": "ORACLE_KIND_EXHAUSTIVE"}


def _stub(target: Target) -> design_pb2_grpc.DesignServiceStub:
    from praxon.design.v1 import design_pb2_grpc

    return design_pb2_grpc.DesignServiceStub(target.channel())


def _target(args) -> Target:
    from services.common.client import resolve_target

    return resolve_target(args.address, args.token, getattr(args, "data_dir", ".praxon"))


def print_campaign(c: pb.Campaign, out=None) -> None:
    from praxon.design.v1 import design_pb2 as pb

    w = (out or sys.stdout).write
    oracle = f" oracle={pb.OracleKind.Name(c.oracle.kind).removeprefix('ORACLE_KIND_').lower()}" \
        if c.oracle.kind else ""
    w(f"campaign {c.id}  {c.name}  length={c.length} alphabet={c.alphabet} batch={c.batch_size} "
      f"{pb.Direction.Name(c.direction).removeprefix('DIRECTION_').lower()}{oracle}\n")
    w(f"  {c.observation_count} observations, {c.round_count} rounds"
      + (f"; best {c.best.value:.4g} {c.best.sequence}" if c.best.sequence else "") + "\n")


def cmd_create(args) -> None:
    from praxon.design.v1 import design_pb2 as pb

    t = _target(args)
    cons = pb.Constraints(allowed_letters=args.allowed.split(",") if args.allowed else [],
                          parents=args.parent or [], forbidden_motifs=args.forbid or [])
    if args.max_edits is not None:
        cons.max_edits = args.max_edits
    req = pb.CreateCampaignRequest(name=args.name, alphabet=args.alphabet, length=args.length, constraints=cons,
                                   batch_size=args.batch_size,
                                   direction=pb.DIRECTION_MINIMIZE if args.minimize else pb.DIRECTION_MAXIMIZE)
    if args.noise_std is not None:
        req.noise_std = args.noise_std
    if args.oracle:
        req.oracle.CopyFrom(pb.Oracle(kind=ORACLES[args.oracle], num_motifs=args.motifs,
                                      motif_length=args.motif_length, seed=args.oracle_seed))
    print_campaign(_stub(t).CreateCampaign(req, metadata=t.metadata).campaign)


def cmd_list(args) -> None:
    from praxon.design.v1 import design_pb2 as pb

    t = _target(args)
    for c in _stub(t).ListCampaigns(pb.ListCampaignsRequest(page_size=args.limit), metadata=t.metadata).campaigns:
        print_campaign(c)


def cmd_get(args) -> None:
    from praxon.design.v1 import design_pb2 as pb

    t = _target(args)
    print_campaign(_stub(t).GetCampaign(pb.GetCampaignRequest(campaign_id=args.campaign), metadata=t.metadata).campaign)


FAILED = "failed"  # a value that says the measurement failed (an infeasible sequence)


def _observation(sequence: str, value: str, **kw) -> pb.Observation:
    from praxon.design.v1 import design_pb2 as pb

    if value.strip().lower() == FAILED:
        return pb.Observation(sequence=sequence, failed=True, **kw)
    return pb.Observation(sequence=sequence, value=float(value) if value else 0.0, **kw)


def _read_observations(path: str) -> list[pb.Observation]:
    """CSV with a header: sequence,value[,replicate[,source_job_id]]; a value "failed" is a failed measurement."""
    with open(path, newline="") as fh:
        return [_observation(r["sequence"], r.get("value") or "", replicate=int(r.get("replicate") or 0),
                             source_job_id=r.get("source_job_id") or "") for r in csv.DictReader(fh)]


def cmd_observe(args) -> None:
    from praxon.design.v1 import design_pb2 as pb

    t = _target(args)
    obs = _read_observations(args.file) if args.file else []
    for item in args.obs or []:
        seq, _, value = item.partition("=")
        obs.append(_observation(seq, value))
    r = _stub(t).Observe(pb.ObserveRequest(campaign_id=args.campaign, observations=obs, use_oracle=args.oracle),
                         metadata=t.metadata)
    print(f"recorded {r.inserted} new, {r.duplicates} already recorded; {r.observation_count} observations")


def _print_suggestions(resp: pb.GetSuggestionsResponse, out=None) -> None:
    w = (out or sys.stdout).write
    w(f"round {resp.round} (job {resp.job.id}): {len(resp.suggestions)} suggestions\n")
    for s in resp.suggestions:
        w(f"  {s.sequence}  ucb={s.ucb:.3f} mean={s.mean:.4g} std={s.std:.3g} ({s.source})\n")


def cmd_suggest(args) -> None:
    from praxon.design.v1 import design_pb2 as pb
    from services.common.client import new_idempotency_key, wait_for_success

    t = _target(args)
    stub = _stub(t)
    req = pb.StartSuggestionJobRequest(campaign_id=args.campaign, solver=SOLVERS[args.solver],
                                       batch_size=args.batch_size, rounds=args.rounds, games=args.games,
                                       kernel=KERNELS[args.kernel], trust_radius=args.trust_radius,
                                       seed=args.seed,
                                       idempotency_key=new_idempotency_key())
    if args.beta is not None:
        req.beta = args.beta
    resp = stub.StartSuggestionJob(req, metadata=t.metadata)
    print(f"round {resp.round}: suggestion job {resp.job.id}")
    if args.no_wait:
        return
    wait_for_success(t, resp.job)
    _print_suggestions(stub.GetSuggestions(pb.GetSuggestionsRequest(campaign_id=args.campaign, job_id=resp.job.id),
                                           metadata=t.metadata))


def cmd_suggestions(args) -> None:
    from praxon.design.v1 import design_pb2 as pb

    t = _target(args)
    _print_suggestions(_stub(t).GetSuggestions(pb.GetSuggestionsRequest(campaign_id=args.campaign, job_id=args.job),
                                               metadata=t.metadata))


def cmd_report(args) -> None:
    from praxon.design.v1 import design_pb2 as pb

    t = _target(args)
    rep = _stub(t).GetCampaignReport(pb.GetCampaignReportRequest(campaign_id=args.campaign), metadata=t.metadata)
    print_campaign(rep.campaign)
    print(rep.table)
    if args.plot:
        Path(args.plot).write_bytes(rep.plot_png)
        print(f"plot written to {args.plot} (artifact {rep.plot.id})")
    else:
        print(f"plot: artifact {rep.plot.id} ({rep.plot.size_bytes} bytes, image/png)")


def add_commands(parts, client_opts) -> None:
    sp = parts.add_parser("gameopt", help="GameOpt campaigns: ask/tell combinatorial design")
    gsub = sp.add_subparsers(dest="gameopt_cmd", required=True)
    cp = gsub.add_parser("campaign", help="create | list | get | observe | suggest | suggestions | report")
    csub = cp.add_subparsers(dest="action", required=True)

    p = csub.add_parser("create", help="create a campaign")
    client_opts(p)
    p.add_argument("--name", required=True)
    p.add_argument("--alphabet", default="ACDEFGHIKLMNPQRSTVWY")
    p.add_argument("--length", type=int, required=True)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--minimize", action="store_true")
    p.add_argument("--noise-std", type=float)
    p.add_argument("--allowed", help="comma-separated allowed letters per site (empty entry = any)")
    p.add_argument("--parent", action="append", help="a parent sequence (repeatable)")
    p.add_argument("--max-edits", type=int, help="at most this many substitutions from the nearest parent")
    p.add_argument("--forbid", action="append", help="a forbidden motif (repeatable)")
    p.add_argument("--oracle", choices=sorted(ORACLES), help="a built-in oracle (unattended benchmark campaign)")
    p.add_argument("--motifs", type=int, default=2)
    p.add_argument("--motif-length", type=int, default=4)
    p.add_argument("--oracle-seed", type=int, default=0)
    p.set_defaults(func=cmd_create)

    p = csub.add_parser("list", help="list campaigns")
    client_opts(p)
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(func=cmd_list)

    p = csub.add_parser("get", help="show a campaign")
    client_opts(p)
    p.add_argument("campaign")
    p.set_defaults(func=cmd_get)

    p = csub.add_parser("observe", help="tell measurements: SEQ=VALUE ... or --file obs.csv")
    client_opts(p)
    p.add_argument("campaign")
    p.add_argument("obs", nargs="*", help="SEQUENCE=VALUE (replicate 0); VALUE \"failed\": the measurement failed")
    p.add_argument("--file", help="CSV: sequence,value[,replicate[,source_job_id]]")
    p.add_argument("--oracle", action="store_true", help="score with the campaign's oracle")
    p.set_defaults(func=cmd_observe)

    p = csub.add_parser("suggest", help="ask for the next batch (a job with progress)")
    client_opts(p)
    p.add_argument("campaign")
    p.add_argument("--solver", choices=sorted(SOLVERS), default="hedge")
    p.add_argument("--batch-size", type=int, default=0)
    p.add_argument("--rounds", type=int, default=0)
    p.add_argument("--games", type=int, default=0, help="games per batch (0: 3, as the paper's code)")
    p.add_argument("--beta", type=float)
    p.add_argument("--kernel", choices=sorted(KERNELS), default="onehot")
    p.add_argument("--trust-radius", type=int, default=0,
                   help="suggest within this many substitutions of the best observed sequence (0: off)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-wait", action="store_true")
    p.set_defaults(func=cmd_suggest)

    p = csub.add_parser("suggestions", help="show a suggestion job's batch (default: the latest)")
    client_opts(p)
    p.add_argument("campaign")
    p.add_argument("--job", default="")
    p.set_defaults(func=cmd_suggestions)

    p = csub.add_parser("report", help="best so far per round, and the plot")
    client_opts(p)
    p.add_argument("campaign")
    p.add_argument("--plot", help="write the PNG here")
    p.set_defaults(func=cmd_report)


DEMO_ORACLE = {"kind": "ehrlich", "num_states": 10, "length": 8, "num_motifs": 1, "motif_length": 4, "seed": 0}


def demo(target: Target, rounds: int = 12) -> None:
    """An oracle campaign on the benchmark's small function (an Ehrlich function over 10 letters, length 8, one motif
    of length 4; seed 0, not chosen for its result): a random first batch of 4 scored by the oracle, then `rounds`
    GameOpt suggestion jobs (best response), each watched with a progress bar and scored by the oracle when it
    succeeds; then the best-so-far table, and random search with the same number of evaluations on the same
    function (scored here, in the client, by the same oracle) as the baseline."""
    from praxon.design.v1 import design_pb2 as pb
    from services.common.client import new_idempotency_key, wait_for_success

    import uuid

    import numpy as np

    from services.design.gameopt.oracles import AMINO_ACIDS, make_oracle

    spec = DEMO_ORACLE
    letters = AMINO_ACIDS[:spec["num_states"]]
    stub = _stub(target)
    camp = stub.CreateCampaign(pb.CreateCampaignRequest(
        name=f"demo-ehrlich-{uuid.uuid4().hex[:6]}", alphabet=letters, length=spec["length"], batch_size=4,
        direction=pb.DIRECTION_MAXIMIZE, oracle=pb.Oracle(
            kind=pb.ORACLE_KIND_EHRLICH, num_motifs=spec["num_motifs"], motif_length=spec["motif_length"],
            seed=spec["seed"])), metadata=target.metadata).campaign
    print(f"oracle campaign {camp.name}: Ehrlich function, {len(camp.alphabet)} letters x {camp.length} sites, "
          f"{spec['num_motifs']} motif of length {spec['motif_length']}, optimum 1")
    for r in range(rounds + 1):
        job = stub.StartSuggestionJob(pb.StartSuggestionJobRequest(
            campaign_id=camp.id, solver=pb.EQUILIBRIUM_SOLVER_BEST_RESPONSE, seed=r,
            idempotency_key=new_idempotency_key()), metadata=target.metadata).job
        wait_for_success(target, job, f"round {r + 1}")
        c = stub.GetCampaign(pb.GetCampaignRequest(campaign_id=camp.id), metadata=target.metadata).campaign
        print(f"  after round {r + 1}: {c.observation_count} evaluations, best {c.best.value:.3f} {c.best.sequence}")
    rep = stub.GetCampaignReport(pb.GetCampaignReportRequest(campaign_id=camp.id), metadata=target.metadata)
    print(rep.table)
    print(f"plot: artifact {rep.plot.id} ({rep.plot.size_bytes} bytes, image/png)")
    # the baseline: uniform random sequences, as many as the campaign evaluated, 20 independent draws
    oracle, n = make_oracle(spec), c.observation_count
    rng = np.random.default_rng(0)
    random_best = [float(oracle(rng.integers(0, len(letters), (n, spec["length"]))).max()) for _ in range(20)]
    q1, med, q3 = np.quantile(random_best, [0.25, 0.5, 0.75])
    verdict = "beats" if c.best.value > med else "does NOT beat"
    print(f"GameOpt best after {n} evaluations: {c.best.value:.3f}; random search with {n} evaluations on the same "
          f"function: median best {med:.3f} [{q1:.3f}, {q3:.3f}] over 20 draws -> GameOpt {verdict} it")
    print("  (one campaign; over 10 seeds of this function size in benchmarks/design/RESULTS.md GameOpt (best "
          "response) reaches the optimum in 8 of 10 within 60 evaluations, random search in 0, the GA in 3, BoTorch's "
          "local search in 9. On a 20-letter, 12-site function after 120 evaluations GameOpt (Hedge) has the highest "
          "median best value (0.56 vs 0.50 for GP-UCB, 0.375 for random search) but reaches the optimum in one seed "
          "of 10; it does not lead on the 32-site functions)")
