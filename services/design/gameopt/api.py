"""DesignService (GameOpt campaigns): proto <-> domain only; campaigns, observations and rounds live in store.py,
the suggestion job in jobs.py."""
from __future__ import annotations

import grpc

from praxon.design.v1 import design_pb2 as pb
from praxon.design.v1 import design_pb2_grpc
from services.common import convert
from services.common.jobs import page_size
from services.common.server import AppContext, current_tenant
from services.design.gameopt.store import CampaignSpec, CampaignStore, ObservationIn, SuggestOptions

DIRECTIONS = {pb.DIRECTION_MAXIMIZE: "MAXIMIZE", pb.DIRECTION_MINIMIZE: "MINIMIZE"}
DIRECTION_ENUMS = {v: k for k, v in DIRECTIONS.items()}
SOLVERS = {pb.EQUILIBRIUM_SOLVER_UNSPECIFIED: "hedge", pb.EQUILIBRIUM_SOLVER_HEDGE: "hedge",
           pb.EQUILIBRIUM_SOLVER_BEST_RESPONSE: "best_response"}
KERNELS = {pb.KERNEL_UNSPECIFIED: "onehot", pb.KERNEL_ONE_HOT_RBF: "onehot", pb.KERNEL_CATEGORICAL: "categorical"}
ORACLES = {pb.ORACLE_KIND_EHRLICH: "ehrlich", pb.ORACLE_KIND_EXHAUSTIVE: "exhaustive"}
ORACLE_ENUMS = {v: k for k, v in ORACLES.items()}


def _oracle(msg: pb.Oracle, alphabet_size: int, length: int) -> dict | None:
    if msg.kind == pb.ORACLE_KIND_UNSPECIFIED:
        return None
    kind = convert.enum_of(ORACLES, msg.kind, "oracle.kind")
    out = {"kind": kind, "num_states": alphabet_size, "length": length, "seed": int(msg.seed)}
    if kind == "ehrlich":
        out.update(num_motifs=msg.num_motifs or 2, motif_length=msg.motif_length or 4,
                   quantization=msg.quantization or (msg.motif_length or 4))
    return out


def _oracle_msg(spec: dict | None) -> pb.Oracle | None:
    if not spec:
        return None
    return pb.Oracle(kind=ORACLE_ENUMS[spec["kind"]], num_motifs=int(spec.get("num_motifs") or 0),
                     motif_length=int(spec.get("motif_length") or 0), quantization=int(spec.get("quantization") or 0),
                     seed=int(spec.get("seed") or 0))


def _observation(row: dict) -> pb.Observation:
    failed = row["value"] is None  # a failed measurement (an infeasible sequence): no value
    return pb.Observation(sequence=row["sequence"], value=0.0 if failed else row["value"], replicate=row["replicate"],
                          source_job_id=str(row["source_job_id"] or ""), round=row["round"],
                          observe_time=convert.ts(row["observed_at"]), failed=failed)


def campaign_message(row: dict) -> pb.Campaign:
    c = pb.Constraints(allowed_letters=list(row["allowed_letters"]), parents=list(row["parents"]),
                       forbidden_motifs=list(row["forbidden_motifs"]))
    if row["max_edits"] is not None:
        c.max_edits = row["max_edits"]
    msg = pb.Campaign(id=str(row["id"]), name=row["name"], alphabet=row["alphabet"], length=row["length"],
                      constraints=c, batch_size=row["batch_size"], direction=DIRECTION_ENUMS[row["direction"]],
                      observation_count=row["observation_count"], round_count=row["round_count"],
                      create_time=convert.ts(row["created_at"]))
    if row["noise_std"] is not None:
        msg.noise_std = row["noise_std"]
    oracle = _oracle_msg(row["oracle"])
    if oracle is not None:
        msg.oracle.CopyFrom(oracle)
    if row.get("best"):
        msg.best.CopyFrom(_observation(row["best"]))
    return msg


class DesignServicer(design_pb2_grpc.DesignServiceServicer):
    def __init__(self, app: AppContext) -> None:
        self.app = app
        self.store = CampaignStore(app.pool, app.jobs, app.registry)

    async def CreateCampaign(self, request, context):
        c = request.constraints
        alphabet = request.alphabet or "ACDEFGHIKLMNPQRSTVWY"
        direction = convert.enum_of(DIRECTIONS, request.direction, "direction") \
            if request.direction != pb.DIRECTION_UNSPECIFIED else "MAXIMIZE"
        spec = CampaignSpec(name=request.name, alphabet=alphabet, length=request.length,
                            allowed_letters=list(c.allowed_letters), parents=list(c.parents),
                            max_edits=c.max_edits if c.HasField("max_edits") else None,
                            forbidden_motifs=list(c.forbidden_motifs), batch_size=request.batch_size,
                            direction=direction, noise_std=request.noise_std if request.HasField("noise_std") else None,
                            oracle=_oracle(request.oracle, len(alphabet), request.length))
        row = await self.app.db(self.store.create, current_tenant(), spec)
        return pb.CreateCampaignResponse(campaign=campaign_message(row))

    async def GetCampaign(self, request, context):
        row = await self.app.db(self.store.get, current_tenant(), request.campaign_id)
        return pb.GetCampaignResponse(campaign=campaign_message(row))

    async def ListCampaigns(self, request, context):
        size = page_size(request.page_size)
        rows, nxt = await self.app.db(self.store.list, current_tenant(), size, request.page_token)
        return pb.ListCampaignsResponse(campaigns=[campaign_message(r) for r in rows], next_page_token=nxt)

    async def Observe(self, request, context):
        obs = [ObservationIn(o.sequence, o.value, o.replicate, o.source_job_id, o.failed) for o in request.observations]
        out = await self.app.db(self.store.observe, current_tenant(), request.campaign_id, obs, request.use_oracle)
        values = out["values"]
        return pb.ObserveResponse(inserted=out["inserted"], duplicates=out["duplicates"],
                                  observation_count=out["observation_count"],
                                  values=[float("nan") if v is None else v for v in values],
                                  failed=[v is None for v in values])

    async def StartSuggestionJob(self, request, context):
        opt = SuggestOptions(solver=convert.enum_of(SOLVERS, request.solver, "solver"),
                             batch_size=request.batch_size, beta=request.beta if request.HasField("beta") else None,
                             rounds=request.rounds, eta=request.eta if request.HasField("eta") else None,
                             games=request.games, group_size=request.group_size,
                             kernel=convert.enum_of(KERNELS, request.kernel, "kernel"),
                             trust_radius=request.trust_radius, seed=request.seed, idempotency_key=request.idempotency_key)
        job, rnd = await self.app.db(self.store.start_suggestion, current_tenant(), request.campaign_id, opt)
        return pb.StartSuggestionJobResponse(job=convert.job(job), round=rnd)

    async def GetSuggestions(self, request, context):
        job, rnd, items = await self.app.db(self.store.suggestions, current_tenant(), request.campaign_id,
                                            request.job_id)
        return pb.GetSuggestionsResponse(job=convert.job(job), round=rnd, suggestions=[
            pb.Suggestion(sequence=s["sequence"], ucb=float(s.get("ucb") or 0.0), mean=float(s.get("mean") or 0.0),
                          std=float(s.get("std") or 0.0), source=str(s.get("source") or "")) for s in items])

    async def GetCampaignReport(self, request, context):
        rep = await self.app.db(self.store.report, current_tenant(), request.campaign_id)
        rows = [pb.ReportRow(round=r["round"], observations=r["observations"], cumulative=r["cumulative"],
                             best_in_round=r["best_in_round"], best_so_far=r["best_so_far"],
                             best_sequence=r["best_sequence"]) for r in rep["rows"]]
        return pb.GetCampaignReportResponse(campaign=campaign_message(rep["campaign"]), rows=rows,
                                            plot_png=rep["png"], plot=convert.artifact(rep["artifact"]),
                                            table=rep["table"])


def register(server: grpc.aio.Server, app: AppContext) -> list[str]:
    design_pb2_grpc.add_DesignServiceServicer_to_server(DesignServicer(app), server)
    return [pb.DESCRIPTOR.services_by_name["DesignService"].full_name]


__all__ = ["register", "DesignServicer"]
