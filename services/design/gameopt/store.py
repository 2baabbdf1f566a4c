"""Campaigns, observations and suggestion rounds in PostgreSQL (tenant-scoped; migrations/0030_design_gameopt.sql),
behind the gRPC API. Requests are validated here with the same space and constraint code the job uses, so bad
input is INVALID_ARGUMENT on the call, never a failed job."""
from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from psycopg.types.json import Jsonb

from services.common.errors import AlreadyExists, InvalidArgument, NotFound
from services.common.jobs import JobStore, decode_page_token, encode_page_token, parse_uuid
from services.common.params import parse_params
from services.common.registry import Registry
from services.design.gameopt.oracles import AMINO_ACIDS, make_oracle, oracle_values
from services.design.gameopt.params import MAX_SNAPSHOT, SuggestParams
from services.design.gameopt.space import MAX_ALPHABET, MAX_LENGTH, SequenceSpace, check_space

SUGGEST_KIND = "design.gameopt.suggest"
MAX_OBSERVATIONS_PER_CALL = 10_000
MAX_NAME = 128


@dataclass
class CampaignSpec:
    name: str
    alphabet: str
    length: int
    allowed_letters: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    max_edits: int | None = None
    forbidden_motifs: list[str] = field(default_factory=list)
    batch_size: int = 0
    direction: str = "MAXIMIZE"
    noise_std: float | None = None
    oracle: dict | None = None  # {"kind": "ehrlich"|"exhaustive", ...}


@dataclass
class SuggestOptions:
    solver: str = "hedge"
    batch_size: int = 0
    beta: float | None = None
    rounds: int = 0
    eta: float | None = None
    games: int = 0
    group_size: int = 0
    kernel: str = "onehot"
    trust_radius: int = 0  # 0: off
    seed: int = 0
    idempotency_key: str = ""


@dataclass
class ObservationIn:
    sequence: str
    value: float
    replicate: int = 0
    source_job_id: str = ""
    failed: bool = False  # the measurement failed (an infeasible sequence): stored with no value (NULL)


def space_of(row: dict) -> SequenceSpace:
    return SequenceSpace(row["alphabet"], row["length"], tuple(row["allowed_letters"]), tuple(row["parents"]),
                         row["max_edits"], tuple(row["forbidden_motifs"]))


def oracle_of(row: dict):
    spec = row.get("oracle")
    return make_oracle(spec) if spec else None



def _check_sequence(seq: str, alphabet: str, length: int, field_name: str) -> None:
    if len(seq) != length:
        raise InvalidArgument(field_name, f"must have length {length} (got {len(seq)})")
    bad = sorted(set(seq) - set(alphabet))
    if bad:
        raise InvalidArgument(field_name, f"letters not in the alphabet: {''.join(bad)[:40]!r}")


def validate_spec(spec: CampaignSpec) -> SequenceSpace:
    if not spec.name or len(spec.name) > MAX_NAME or not spec.name.isprintable():
        raise InvalidArgument("name", f"required: 1-{MAX_NAME} printable characters")
    alphabet = spec.alphabet
    if len(alphabet) < 2 or len(alphabet) > MAX_ALPHABET or len(set(alphabet)) != len(alphabet) \
            or not alphabet.isprintable() or any(c.isspace() for c in alphabet):
        raise InvalidArgument("alphabet", f"2-{MAX_ALPHABET} distinct printable, non-space letters")
    if not 1 <= spec.length <= MAX_LENGTH:
        raise InvalidArgument("length", f"must be between 1 and {MAX_LENGTH}")
    if not 1 <= spec.batch_size <= 1000:
        raise InvalidArgument("batch_size", "must be between 1 and 1000")
    if spec.direction not in ("MAXIMIZE", "MINIMIZE"):
        raise InvalidArgument("direction", "required: DIRECTION_MAXIMIZE or DIRECTION_MINIMIZE")
    if spec.noise_std is not None and not (math.isfinite(spec.noise_std) and spec.noise_std > 0):
        raise InvalidArgument("noise_std", "must be a finite number > 0")
    c = "constraints."
    if spec.allowed_letters:
        if len(spec.allowed_letters) != spec.length:
            raise InvalidArgument(c + "allowed_letters", f"give none or exactly {spec.length} (one per site)")
        for i, letters in enumerate(spec.allowed_letters):
            bad = sorted(set(letters) - set(alphabet))
            if bad:
                raise InvalidArgument(f"{c}allowed_letters[{i}]", f"letters not in the alphabet: {''.join(bad)[:40]!r}")
    if len(spec.parents) > 1000:
        raise InvalidArgument(c + "parents", "at most 1000")
    for i, p in enumerate(spec.parents):
        _check_sequence(p, alphabet, spec.length, f"{c}parents[{i}]")
    if spec.max_edits is not None:
        if spec.max_edits < 0:
            raise InvalidArgument(c + "max_edits", "must be >= 0")
        if not spec.parents:
            raise InvalidArgument(c + "max_edits", "needs at least one parent")
    if len(spec.forbidden_motifs) > 1000:
        raise InvalidArgument(c + "forbidden_motifs", "at most 1000")
    for i, m in enumerate(spec.forbidden_motifs):
        if not m or len(m) > spec.length:
            raise InvalidArgument(f"{c}forbidden_motifs[{i}]", f"1 to {spec.length} letters")
        bad = sorted(set(m) - set(alphabet))
        if bad:
            raise InvalidArgument(f"{c}forbidden_motifs[{i}]", f"letters not in the alphabet: {''.join(bad)[:40]!r}")
    space = SequenceSpace(alphabet, spec.length, tuple(spec.allowed_letters), tuple(spec.parents), spec.max_edits,
                          tuple(spec.forbidden_motifs))
    try:
        check_space(space)
    except ValueError as exc:
        raise InvalidArgument("constraints", str(exc).removeprefix("constraints: ")) from None
    if spec.oracle is not None:
        try:
            make_oracle(spec.oracle)
        except (ValueError, RuntimeError, KeyError) as exc:
            raise InvalidArgument("oracle", str(exc)) from None
    return space


@dataclass
class CampaignStore:
    pool: Any
    jobs: JobStore
    registry: Registry

    # ---- campaigns ---------------------------------------------------------------------------------------
    def create(self, tenant: str, spec: CampaignSpec) -> dict:
        spec.alphabet = spec.alphabet or AMINO_ACIDS
        validate_spec(spec)
        with self.pool.connection() as conn:
            row = conn.execute(
                "INSERT INTO design_campaigns (tenant_id, name, alphabet, length, allowed_letters, parents, "
                "max_edits, forbidden_motifs, batch_size, direction, noise_std, oracle) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (tenant_id, name) DO NOTHING RETURNING *",
                (tenant, spec.name, spec.alphabet, spec.length, list(spec.allowed_letters), list(spec.parents),
                 spec.max_edits, list(spec.forbidden_motifs), spec.batch_size, spec.direction, spec.noise_std,
                 Jsonb(spec.oracle) if spec.oracle else None)).fetchone()
        if row is None:
            raise AlreadyExists(f"a campaign named {spec.name!r} exists already", reason="CAMPAIGN_EXISTS")
        return self.get(tenant, str(row["id"]))

    def _row(self, conn, tenant: str, campaign_id: str, lock: bool = False) -> dict:
        cid = parse_uuid(campaign_id, "campaign_id")
        row = conn.execute("SELECT * FROM design_campaigns WHERE id = %s AND tenant_id = %s"
                           + (" FOR UPDATE" if lock else ""), (cid, tenant)).fetchone()
        if row is None:
            raise NotFound(f"campaign {cid} not found")
        return row

    def _decorate(self, conn, row: dict) -> dict:
        order = "DESC" if row["direction"] == "MAXIMIZE" else "ASC"
        stats = conn.execute("SELECT count(*) AS n FROM design_observations WHERE campaign_id = %s",
                             (row["id"],)).fetchone()
        best = conn.execute(f"SELECT * FROM design_observations WHERE campaign_id = %s AND value IS NOT NULL "
                            f"ORDER BY value {order}, observed_at LIMIT 1", (row["id"],)).fetchone()
        rounds = conn.execute("SELECT coalesce(max(round), 0) AS r FROM design_suggestion_jobs WHERE campaign_id = %s",
                              (row["id"],)).fetchone()
        return {**row, "observation_count": stats["n"], "round_count": rounds["r"], "best": best}

    def get(self, tenant: str, campaign_id: str) -> dict:
        with self.pool.connection() as conn:
            return self._decorate(conn, self._row(conn, tenant, campaign_id))

    def list(self, tenant: str, size: int, token: str = "") -> tuple[list[dict], str]:
        where, args = ["tenant_id = %s"], [tenant]
        if token:
            created, last = decode_page_token(token)
            where.append("(created_at, id) < (%s, %s)")
            args += [created, last]
        with self.pool.connection() as conn:
            rows = conn.execute(f"SELECT * FROM design_campaigns WHERE {' AND '.join(where)} "
                                "ORDER BY created_at DESC, id DESC LIMIT %s", (*args, size + 1)).fetchall()
            nxt = encode_page_token(rows[size - 1]["created_at"], rows[size - 1]["id"]) if len(rows) > size else ""
            return [self._decorate(conn, r) for r in rows[:size]], nxt

    # ---- observations ------------------------------------------------------------------------------------
    def observe(self, tenant: str, campaign_id: str, observations: list[ObservationIn], use_oracle: bool = False
                ) -> dict:
        if not observations:
            raise InvalidArgument("observations", "give at least one observation")
        if len(observations) > MAX_OBSERVATIONS_PER_CALL:
            raise InvalidArgument("observations", f"at most {MAX_OBSERVATIONS_PER_CALL} per call")
        with self.pool.connection() as conn:
            camp = self._row(conn, tenant, campaign_id, lock=True)
            oracle = oracle_of(camp) if use_oracle else None
            if use_oracle and oracle is None:
                raise InvalidArgument("use_oracle", "this campaign has no oracle")
            space = space_of(camp)
            sources: dict[str, int] = {}
            for i, o in enumerate(observations):
                f = f"observations[{i}]"
                _check_sequence(o.sequence, camp["alphabet"], camp["length"], f + ".sequence")
                if o.replicate < 0:
                    raise InvalidArgument(f + ".replicate", "must be >= 0")
                if use_oracle:
                    if o.value != 0 or o.failed:
                        raise InvalidArgument(f + (".failed" if o.failed else ".value"),
                                              "leave unset with use_oracle (the oracle scores it)")
                elif o.failed and o.value != 0:
                    raise InvalidArgument(f + ".value", "a failed measurement has no value: leave it unset")
                elif not math.isfinite(o.value):
                    raise InvalidArgument(f + ".value", "must be a finite number")
                if o.source_job_id and o.source_job_id not in sources:
                    jid = parse_uuid(o.source_job_id, f + ".source_job_id")
                    s = conn.execute("SELECT round FROM design_suggestion_jobs WHERE job_id = %s AND campaign_id = %s",
                                     (jid, camp["id"])).fetchone()
                    if s is None:
                        raise InvalidArgument(f + ".source_job_id", "not a suggestion job of this campaign")
                    sources[o.source_job_id] = s["round"]
            values = oracle_values(oracle, np.stack([space.encode(o.sequence) for o in observations])) \
                if use_oracle else [None if o.failed else float(o.value) for o in observations]
            current = conn.execute("SELECT coalesce(max(round), 0) AS r FROM design_suggestion_jobs "
                                   "WHERE campaign_id = %s", (camp["id"],)).fetchone()["r"]
            seen: dict[tuple[str, int], float] = {}
            for i, (o, v) in enumerate(zip(observations, values, strict=False)):
                key = (o.sequence, o.replicate)
                if key in seen and seen[key] != v:
                    raise InvalidArgument(f"observations[{i}].value", "the same (sequence, replicate) twice in one "
                                                                      "call with different values")
                seen[key] = v
            existing = {(r["sequence"], r["replicate"]): r["value"] for r in conn.execute(
                "SELECT sequence, replicate, value FROM design_observations WHERE campaign_id = %s "
                "AND sequence = ANY(%s)", (camp["id"], list({o.sequence for o in observations})))}
            inserted = duplicates = 0
            for i, (o, v) in enumerate(zip(observations, values, strict=False)):
                key = (o.sequence, o.replicate)
                if key in existing:
                    if existing[key] != v:
                        raise InvalidArgument(f"observations[{i}].value",
                                              f"replicate {o.replicate} of this sequence is recorded with value "
                                              f"{existing[key]!r}; a new measurement needs a new replicate number",
                                              reason="OBSERVATION_CONFLICT")
                    duplicates += 1
                    continue
                existing[key] = v
                # ON CONFLICT: the row may have been written since the read above (an oracle campaign's finishing
                # hook inserts its batch's scores). The campaign row lock already orders Observe against that
                # hook (its foreign-key check takes a key-share lock on the campaign row), so this is a second
                # guard: a concurrent writer makes this a duplicate or a conflict, never a unique-key error.
                row = conn.execute(
                    "INSERT INTO design_observations (campaign_id, sequence, replicate, value, source_job_id, round) "
                    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (campaign_id, sequence, replicate) DO NOTHING "
                    "RETURNING value",
                    (camp["id"], o.sequence, o.replicate, v, o.source_job_id or None,
                     sources.get(o.source_job_id, current))).fetchone()
                if row is None:
                    recorded = conn.execute("SELECT value FROM design_observations WHERE campaign_id = %s "
                                            "AND sequence = %s AND replicate = %s",
                                            (camp["id"], o.sequence, o.replicate)).fetchone()["value"]
                    if recorded != v:
                        raise InvalidArgument(f"observations[{i}].value",
                                              f"replicate {o.replicate} of this sequence is recorded with value "
                                              f"{recorded!r}; a new measurement needs a new replicate number",
                                              reason="OBSERVATION_CONFLICT")
                    duplicates += 1
                    continue
                inserted += 1
            count = conn.execute("SELECT count(*) AS n FROM design_observations WHERE campaign_id = %s",
                                 (camp["id"],)).fetchone()["n"]
        return {"inserted": inserted, "duplicates": duplicates, "observation_count": count, "values": values}

    def observations(self, conn, campaign_id) -> list[dict]:
        return conn.execute("SELECT * FROM design_observations WHERE campaign_id = %s "
                            "ORDER BY observed_at, round, sequence, replicate", (campaign_id,)).fetchall()

    # ---- suggestions -------------------------------------------------------------------------------------
    def start_suggestion(self, tenant: str, campaign_id: str, opt: SuggestOptions) -> tuple[dict, int]:
        if opt.idempotency_key:
            with self.pool.connection() as conn:
                found = conn.execute(
                    "SELECT j.*, s.round AS campaign_round, s.campaign_id FROM jobs j "
                    "JOIN design_suggestion_jobs s ON s.job_id = j.id "
                    "WHERE j.tenant_id = %s AND j.idempotency_key = %s", (tenant, opt.idempotency_key)).fetchone()
            if found is not None:
                if str(found["campaign_id"]) != parse_uuid(campaign_id, "campaign_id"):
                    raise InvalidArgument("idempotency_key", "already used for another campaign's suggestion")
                return found, found["campaign_round"]
        with self.pool.connection() as conn:
            camp = self._row(conn, tenant, campaign_id)
            obs = conn.execute("SELECT sequence, value FROM design_observations WHERE campaign_id = %s "
                               "ORDER BY observed_at DESC, sequence, replicate LIMIT %s",
                               (camp["id"], MAX_SNAPSHOT)).fetchall()
        obs.reverse()
        params: dict[str, Any] = {
            "campaign_id": str(camp["id"]),
            "space": {"alphabet": camp["alphabet"], "length": camp["length"],
                      "allowed_letters": list(camp["allowed_letters"]), "parents": list(camp["parents"]),
                      "max_edits": camp["max_edits"], "forbidden_motifs": list(camp["forbidden_motifs"])},
            "direction": camp["direction"], "noise_std": camp["noise_std"], "oracle": camp["oracle"],
            "solver": opt.solver, "batch_size": opt.batch_size or camp["batch_size"], "kernel": opt.kernel,
            "seed": opt.seed, "sequences": [r["sequence"] for r in obs], "values": [r["value"] for r in obs]}
        for name in ("rounds", "games"):
            if getattr(opt, name):
                params[name] = getattr(opt, name)
        for name in ("group_size", "trust_radius"):
            if getattr(opt, name):
                params[name] = getattr(opt, name)
        for name in ("beta", "eta"):
            if getattr(opt, name) is not None:
                params[name] = getattr(opt, name)
        paths = {k: k for k in ("solver", "batch_size", "beta", "rounds", "eta", "games", "group_size", "kernel",
                                "trust_radius", "seed")}
        parse_params(SuggestParams, params, field_paths=paths)
        if opt.group_size > 1:
            from services.design.gameopt.games import MAX_STRATEGIES
            if len(camp["alphabet"]) ** opt.group_size > MAX_STRATEGIES:
                raise InvalidArgument("group_size", f"alphabet size ** group_size must be at most {MAX_STRATEGIES}")
        holder: dict[str, int] = {}

        def in_tx(conn, job: dict) -> None:
            conn.execute("SELECT id FROM design_campaigns WHERE id = %s FOR UPDATE", (camp["id"],))
            r = conn.execute("SELECT coalesce(max(round), 0) + 1 AS r FROM design_suggestion_jobs "
                             "WHERE campaign_id = %s", (camp["id"],)).fetchone()["r"]
            conn.execute("INSERT INTO design_suggestion_jobs (job_id, campaign_id, round, observations) "
                         "VALUES (%s, %s, %s, %s)", (job["id"], camp["id"], r, len(obs)))
            holder["round"] = r

        job = self.jobs.submit(tenant, SUGGEST_KIND, params, opt.idempotency_key, in_transaction=in_tx)
        if "round" not in holder:  # an idempotent repeat that raced the lookup above
            with self.pool.connection() as conn:
                s = conn.execute("SELECT round FROM design_suggestion_jobs WHERE job_id = %s", (job["id"],)).fetchone()
            holder["round"] = s["round"] if s else 0
        return job, holder["round"]

    def suggestions(self, tenant: str, campaign_id: str, job_id: str = "") -> tuple[dict, int, list[dict]]:
        with self.pool.connection() as conn:
            camp = self._row(conn, tenant, campaign_id)
            if job_id:
                jid = parse_uuid(job_id, "job_id")
                s = conn.execute("SELECT * FROM design_suggestion_jobs WHERE job_id = %s AND campaign_id = %s",
                                 (jid, camp["id"])).fetchone()
                if s is None:
                    raise NotFound(f"suggestion job {jid} not found in campaign {camp['id']}")
            else:
                s = conn.execute("SELECT s.* FROM design_suggestion_jobs s JOIN jobs j ON j.id = s.job_id "
                                 "WHERE s.campaign_id = %s AND j.state = 'SUCCEEDED' ORDER BY s.round DESC LIMIT 1",
                                 (camp["id"],)).fetchone()
                if s is None:
                    raise NotFound(f"campaign {camp['id']} has no finished suggestion yet")
            job = conn.execute("SELECT * FROM jobs WHERE id = %s", (s["job_id"],)).fetchone()
        items = list((job["result"] or {}).get("suggestions") or []) if job["state"] == "SUCCEEDED" else []
        return job, s["round"], items

    # ---- report ------------------------------------------------------------------------------------------
    def report(self, tenant: str, campaign_id: str) -> dict:
        """The report, and its plot as an artifact. A read: the plot artifact is written once per state of the
        campaign and reused while nothing changed. Observations are only ever added (never updated or deleted),
        so their count and the latest observed_at identify the state the plot shows."""
        with self.pool.connection() as conn:
            camp = self._decorate(conn, self._row(conn, tenant, campaign_id))
            obs = self.observations(conn, camp["id"])
        rows = report_rows(obs, camp["direction"])
        last = max((o["observed_at"] for o in obs), default=None)
        meta = {"campaign_id": str(camp["id"]), "observations": len(obs),
                "last_observed_at": last.isoformat() if last else ""}
        name = f"campaign-{camp['id']}-best-so-far.png"
        with self.pool.connection() as conn:
            # one writer per campaign at a time, so two concurrent first reads still make one artifact
            conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 13))", (str(camp["id"]),))
            art = conn.execute("SELECT * FROM artifacts WHERE tenant_id = %s AND name = %s AND committed "
                               "AND metadata @> %s ORDER BY created_at DESC LIMIT 1",
                               (tenant, name, Jsonb(meta))).fetchone()
            png = None
            if art is not None:
                try:
                    png = self.registry.store.get_bytes(art["object_key"], art["sha256"])
                except NotFound:  # the blob is gone from the store: draw and record it again
                    png = None
            if png is None:
                png = plot_png(obs, camp["direction"], camp["name"])
                art = self.registry.put_artifact(conn, tenant, name, png, "image/png", metadata=meta)
        return {"campaign": camp, "rows": rows, "png": png, "artifact": art, "table": format_table(rows)}


def report_rows(obs: list[dict], direction: str) -> list[dict]:
    better = (lambda a, b: a > b) if direction == "MAXIMIZE" else (lambda a, b: a < b)
    by_round: dict[int, list[dict]] = {}
    for o in obs:
        by_round.setdefault(int(o["round"]), []).append(o)
    rows, best, best_seq, cum = [], None, "", 0
    nan = float("nan")
    for r in sorted(by_round):
        items = by_round[r]
        cum += len(items)
        in_round = None  # failed measurements (value None) have no value to compare
        for o in items:
            if o["value"] is not None and (in_round is None or better(o["value"], in_round["value"])):
                in_round = o
        if in_round is not None and (best is None or better(in_round["value"], best)):
            best, best_seq = in_round["value"], in_round["sequence"]
        rows.append({"round": r, "observations": len(items), "cumulative": cum,
                     "best_in_round": nan if in_round is None else float(in_round["value"]),
                     "best_so_far": nan if best is None else float(best), "best_sequence": best_seq})
    return rows


def format_table(rows: list[dict]) -> str:
    head = f"{'round':>5} {'obs':>5} {'total':>6} {'best in round':>14} {'best so far':>12}  best sequence"
    lines = [head]
    for r in rows:
        lines.append(f"{r['round']:>5} {r['observations']:>5} {r['cumulative']:>6} {r['best_in_round']:>14.4g} "
                     f"{r['best_so_far']:>12.4g}  {r['best_sequence']}")
    return "\n".join(lines)


def plot_png(obs: list[dict], direction: str, title: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3.5), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    values = np.array([np.nan if o["value"] is None else o["value"] for o in obs], dtype=float)  # NaN: failed
    if len(values):
        best = np.fmax.accumulate(values) if direction == "MAXIMIZE" else np.fmin.accumulate(values)
        ax.step(np.arange(1, len(values) + 1), best, where="post", label="best so far")
        ax.scatter(np.arange(1, len(values) + 1), values, s=8, alpha=0.4, label="observations")
        rounds = np.array([o["round"] for o in obs])
        for i in np.flatnonzero(np.diff(rounds)) + 1:
            ax.axvline(i + 0.5, color="grey", lw=0.5, alpha=0.5)
        ax.legend(loc="lower right" if direction == "MAXIMIZE" else "upper right", fontsize=8)
    ax.set_xlabel("observations")
    ax.set_ylabel("value")
    ax.set_title(title[:60], fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
