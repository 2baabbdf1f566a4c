"""The console's pages (Starlette, Jinja2 templates, one small script): `create_app(address)` is the ASGI app.

Sign-in: the user pastes an API token; the console checks it with one call (ListJobs) and keeps it server-side in
memory under a random session id, the only thing the browser's cookie holds (HttpOnly, SameSite=Strict). Every page
calls the platform with that token, so it shows that token's tenant only; a call answered UNAUTHENTICATED (a token
revoked or expired since) ends the session. An id the token cannot see (another tenant's, or none) is a 404 page.
Cancel is the one write: a confirmation page whose form carries the session's CSRF token.
Handlers are plain functions (Starlette runs them in its thread pool, where the gRPC calls block); the live
progress stream (/watch, server-sent events) is async, over an asyncio channel."""
from __future__ import annotations

import functools
import hmac
import json
import secrets
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlencode

import grpc
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from praxon.common.v1 import common_pb2
from praxon.design.v1 import crystals_pb2, design_pb2
from praxon.jobs.v1 import jobs_pb2
from praxon.models.v1 import models_pb2
from praxon.unlearning.v1 import unlearning_pb2
from services.common.client import TERMINAL, error_line, state_name
from services.console.lineage import lineage_svg, method_name
from services.console.platform import (CALL_TIMEOUT_S, NOT_FOUND_CODES, Platform, finished_events, merged_watch,
                                       metadata, to_dict)

HERE = Path(__file__).resolve().parent
COOKIE = "praxon_console"
PAGE_SIZE = 50
STATES = ("QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
# Artifacts the console shows inline (it fetches them and serves them itself, so a page needs no route to the
# object store). Raster images only: an SVG or HTML artifact served from the console's origin could run script.
INLINE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
INLINE_MAX_BYTES = 20 << 20
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


@dataclass
class Session:
    token: str
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    last_seen: float = field(default_factory=time.monotonic)

    @property
    def token_hint(self) -> str:
        return f"…{self.token[-4:]}" if len(self.token) > 8 else "…"


class Sessions:
    """Signed-in users: session id -> Session, in this process's memory (a restart signs everyone out)."""

    def __init__(self, idle_s: float):
        self.idle_s = idle_s
        self._by_id: dict[str, Session] = {}
        self._lock = threading.Lock()

    def start(self, token: str) -> str:
        sid = secrets.token_urlsafe(32)
        with self._lock:
            now = time.monotonic()
            self._by_id = {k: s for k, s in self._by_id.items() if now - s.last_seen < self.idle_s}
            self._by_id[sid] = Session(token)
        return sid

    def get(self, sid: str | None) -> Session | None:
        with self._lock:
            s = self._by_id.get(sid or "")
            if s is None or time.monotonic() - s.last_seen >= self.idle_s:
                self._by_id.pop(sid or "", None)
                return None
            s.last_seen = time.monotonic()
            return s

    def end(self, sid: str | None) -> None:
        with self._lock:
            self._by_id.pop(sid or "", None)


class PageNotFound(Exception):
    """The page names nothing this token can see."""


def create_app(address: str, *, service_addresses: dict[str, str] | None = None, secure_cookies: bool = False,
               session_idle_s: float = 8 * 3600) -> Starlette:
    """The console for the platform at `address` (host:port of its gRPC API; service_addresses: the services served
    elsewhere, see Platform). secure_cookies: mark the session cookie Secure (behind HTTPS)."""
    platform = Platform(address, service_addresses)
    sessions = Sessions(session_idle_s)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters["json"] = lambda v: json.dumps(v, indent=2, sort_keys=True, default=str)
    templates.env.filters["size"] = _size
    templates.env.globals.update(state_name=state_name, STATES=STATES, TERMINAL=TERMINAL, INLINE_TYPES=INLINE_TYPES)

    def render(request: Request, template: str, status: int = 200, session: Session | None = None, **context):
        context.update(session=session, address=address)
        return templates.TemplateResponse(request, template, context, status_code=status, headers=SECURITY_HEADERS)

    def signed_in(handler):
        """A page for a signed-in user: handler(request, session); a call's failure becomes the page it means."""
        @functools.wraps(handler)
        def endpoint(request: Request):
            session = sessions.get(request.cookies.get(COOKIE))
            if session is None:
                return _to_signin(request)
            try:
                return handler(request, session)
            except PageNotFound:
                return render(request, "error.html", 404, session, title="Not found",
                              message="There is nothing here for this token's tenant.")
            except grpc.RpcError as err:
                code = err.code() if hasattr(err, "code") else None
                if code == grpc.StatusCode.UNAUTHENTICATED:
                    sessions.end(request.cookies.get(COOKIE))
                    return _to_signin(request, "expired")
                if code in NOT_FOUND_CODES:
                    return render(request, "error.html", 404, session, title="Not found",
                                  message="There is nothing here for this token's tenant.")
                if code == grpc.StatusCode.UNIMPLEMENTED:
                    return render(request, "error.html", 501, session, title="Not served",
                                  message=f"The platform at {address} does not serve this: {err.details()}")
                status = 503 if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) else 502
                return render(request, "error.html", status, session, title="The platform did not answer",
                              message=error_line(err))
        return endpoint

    def call(method, request_message, session: Session):
        return method(request_message, metadata=metadata(session.token), timeout=CALL_TIMEOUT_S)

    # ------------------------------------------------------------------------------------------ sign in and out
    def signin(request: Request):
        if request.method == "GET":
            reason = request.query_params.get("reason", "")
            message = "Your token was refused (revoked or expired): sign in again." if reason == "expired" else ""
            return render(request, "signin.html", message=message, next=_safe_next(request.query_params.get("next")))
        form = _form(request)
        token, nxt = form.get("token", "").strip(), _safe_next(form.get("next"))
        try:
            if not token:
                raise ValueError("empty")
            platform.jobs.ListJobs(jobs_pb2.ListJobsRequest(page_size=1), metadata=metadata(token),
                                   timeout=CALL_TIMEOUT_S)
        except (ValueError, grpc.RpcError) as err:
            code = getattr(err, "code", lambda: None)()
            if isinstance(err, grpc.RpcError) and code not in (grpc.StatusCode.UNAUTHENTICATED,
                                                                grpc.StatusCode.PERMISSION_DENIED):
                return render(request, "signin.html", 503, message=f"The platform did not answer: {error_line(err)}",
                              next=nxt)
            return render(request, "signin.html", 401, message="This token was refused.", next=nxt)
        response = RedirectResponse(nxt, 303)
        response.set_cookie(COOKIE, sessions.start(token), httponly=True, samesite="strict", secure=secure_cookies,
                            path="/")
        return response

    def signout(request: Request):
        form = _form(request)
        session = sessions.get(request.cookies.get(COOKIE))
        if session is not None and hmac.compare_digest(form.get("csrf", ""), session.csrf):
            sessions.end(request.cookies.get(COOKIE))
        response = RedirectResponse("/signin", 303)
        response.delete_cookie(COOKIE, path="/")
        return response

    # ------------------------------------------------------------------------------------------ jobs
    @signed_in
    def jobs_page(request: Request, session: Session):
        q = request.query_params
        kind, state, parent, page = q.get("kind", "").strip(), q.get("state", ""), q.get("parent", "").strip(), \
            q.get("page", "")
        states = [common_pb2.JobState.Value(f"JOB_STATE_{state}")] if state in STATES else []
        listed = call(platform.jobs.ListJobs, jobs_pb2.ListJobsRequest(
            page_size=PAGE_SIZE, page_token=page, kind=kind, states=states, parent_job_id=parent), session)
        following = {"kind": kind, "state": state, "parent": parent, "page": listed.next_page_token}
        return render(request, "jobs.html", session=session, jobs=listed.jobs, kind=kind, state=state, parent=parent,
                      next_page=f"/jobs?{urlencode(following)}" if listed.next_page_token else "")

    @signed_in
    def job_page(request: Request, session: Session):
        job = call(platform.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=request.path_params["job_id"]), session).job
        ended = state_name(job.state) in TERMINAL
        events = finished_events(platform, session.token, job.id) if ended else []
        children = call(platform.jobs.ListJobs, jobs_pb2.ListJobsRequest(page_size=PAGE_SIZE, parent_job_id=job.id),
                        session).jobs
        return render(request, "job.html", session=session, job=job, ended=ended, events=events, children=children,
                      params=to_dict(job.params), result=to_dict(job.result))

    @signed_in
    def cancel_page(request: Request, session: Session):
        job_id = request.path_params["job_id"]
        if request.method == "POST":
            if not hmac.compare_digest(_form(request).get("csrf", ""), session.csrf):
                return render(request, "error.html", 403, session, title="Refused",
                              message="The form is stale: open the job and cancel again.")
            call(platform.jobs.CancelJob, jobs_pb2.CancelJobRequest(job_id=job_id), session)
            return RedirectResponse(f"/jobs/{quote(job_id)}", 303)
        job = call(platform.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job_id), session).job
        return render(request, "cancel.html", session=session, job=job)

    async def watch(request: Request):
        """Server-sent events: the jobs named (?job=ID:AFTER_SEQUENCE, repeated) as they progress, then `end`."""
        session = sessions.get(request.cookies.get(COOKIE))
        if session is None:
            return PlainTextResponse("sign in first", 401)
        positions: dict[str, int] = {}
        for item in request.query_params.getlist("job")[:PAGE_SIZE]:
            job_id, _, after = item.partition(":")
            positions[job_id] = int(after) if after.isdigit() else 0

        async def stream():
            yield "retry: 2000\n\n"
            async for event in merged_watch(platform, session.token, positions):
                yield f"data: {json.dumps(event)}\n\n"
            yield "event: end\ndata: {}\n\n"
        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    # ------------------------------------------------------------------------------------------ artifacts
    @signed_in
    def artifact_download(request: Request, session: Session):
        """A redirect to a presigned URL of the object store (the bytes never pass through the console)."""
        got = call(platform.artifacts.GetArtifact, _artifact_request(request), session)
        return RedirectResponse(got.url, 302, headers={"Cache-Control": "no-store"})

    @signed_in
    def artifact_inline(request: Request, session: Session):
        """An image artifact served from the console itself, for <img> on a page (see INLINE_TYPES)."""
        got = call(platform.artifacts.GetArtifact, _artifact_request(request), session)
        if got.artifact.content_type not in INLINE_TYPES or got.artifact.size_bytes > INLINE_MAX_BYTES:
            raise PageNotFound()
        with urllib.request.urlopen(got.url, timeout=CALL_TIMEOUT_S) as resp:  # a URL the platform signed
            data = resp.read(INLINE_MAX_BYTES + 1)
        return Response(data, media_type=got.artifact.content_type, headers=SECURITY_HEADERS)

    # ------------------------------------------------------------------------------------------ models
    @signed_in
    def models_page(request: Request, session: Session):
        page = request.query_params.get("page", "")
        listed = call(platform.models.ListModels, models_pb2.ListModelsRequest(page_size=PAGE_SIZE, page_token=page),
                      session)
        return render(request, "models.html", session=session, models=listed.models,
                      next_page=f"/models?page={quote(listed.next_page_token)}" if listed.next_page_token else "")

    @signed_in
    def model_page(request: Request, session: Session):
        name = request.path_params["name"]
        versions = call(platform.models.ListModelVersions, models_pb2.ListModelVersionsRequest(
            name=name, page_size=PAGE_SIZE), session).versions
        if not versions:
            raise PageNotFound()
        # the lineage of every version listed (ancestors in other models included), each version drawn once
        drawn: dict[str, models_pb2.ModelVersion] = {}
        datasets: list = []
        for v in versions:
            if v.id in drawn:
                continue
            lineage = call(platform.models.GetLineage, models_pb2.GetLineageRequest(
                model=common_pb2.ModelRef(name=v.name, version=v.version)), session)
            drawn.update({x.id: x for x in lineage.versions})
            datasets += lineage.datasets
        records = _records_of(session, {x.name for x in drawn.values()})
        return render(request, "model.html", session=session, name=name, versions=versions,
                      svg=lineage_svg(list(drawn.values()), datasets, records), records=records,
                      configs={v.id: to_dict(v.config) for v in versions},
                      labels={x.id: f"{x.name} v{x.version}" for x in drawn.values()},
                      method_name=method_name)

    def _records_of(session: Session, model_names: set[str]) -> list:
        records = []
        for model_name in sorted(model_names):
            try:
                records += call(platform.unlearning.ListUnlearningRecords, unlearning_pb2.ListUnlearningRecordsRequest(
                    page_size=PAGE_SIZE, model_name=model_name), session).records
            except grpc.RpcError as err:  # a platform without the unlearning service: no records to draw
                if err.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
        return records

    # ------------------------------------------------------------------------------------------ campaigns
    @signed_in
    def campaigns_page(request: Request, session: Session):
        page = request.query_params.get("page", "")
        listed = call(platform.design.ListCampaigns, design_pb2.ListCampaignsRequest(
            page_size=PAGE_SIZE, page_token=page), session)
        return render(request, "campaigns.html", session=session, campaigns=listed.campaigns,
                      next_page=f"/campaigns?page={quote(listed.next_page_token)}" if listed.next_page_token else "")

    @signed_in
    def campaign_page(request: Request, session: Session):
        campaign_id = request.path_params["campaign_id"]
        report = call(platform.design.GetCampaignReport, design_pb2.GetCampaignReportRequest(
            campaign_id=campaign_id), session)
        try:
            suggestions = call(platform.design.GetSuggestions, design_pb2.GetSuggestionsRequest(
                campaign_id=campaign_id), session)
        except grpc.RpcError as err:
            if err.code() not in NOT_FOUND_CODES + (grpc.StatusCode.FAILED_PRECONDITION,):
                raise
            suggestions = None  # no suggestion job has succeeded yet
        return render(request, "campaign.html", session=session, report=report, campaign=report.campaign,
                      suggestions=suggestions, direction=design_pb2.Direction.Name(report.campaign.direction)
                      .removeprefix("DIRECTION_").lower())

    @signed_in
    def campaign_plot(request: Request, session: Session):
        report = call(platform.design.GetCampaignReport, design_pb2.GetCampaignReportRequest(
            campaign_id=request.path_params["campaign_id"]), session)
        if not report.plot_png:
            raise PageNotFound()
        return Response(report.plot_png, media_type="image/png", headers=SECURITY_HEADERS)

    # ------------------------------------------------------------------------------------------ crystals, flows
    def job_list(kind: str, template: str):
        @signed_in
        def page(request: Request, session: Session):
            token = request.query_params.get("page", "")
            listed = call(platform.jobs.ListJobs, jobs_pb2.ListJobsRequest(
                page_size=PAGE_SIZE, page_token=token, kind=kind), session)
            return render(request, template, session=session, jobs=listed.jobs, kind=kind,
                          next_page=f"?page={quote(listed.next_page_token)}" if listed.next_page_token else "")
        return page

    @signed_in
    def crystal_page(request: Request, session: Session):
        job_id = request.path_params["job_id"]
        job = call(platform.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job_id), session).job
        if job.kind != "design.crystals.generate":
            raise PageNotFound()
        crystal_set = None
        if state_name(job.state) == "SUCCEEDED":
            crystal_set = call(platform.crystals.GetCrystalSet, crystals_pb2.GetCrystalSetRequest(job_id=job_id),
                               session).crystal_set
        summary = to_dict(crystal_set.summary) if crystal_set else {}
        groups = summary.pop("groups", [])
        return render(request, "crystal.html", session=session, job=job, crystal_set=crystal_set, summary=summary,
                      groups=groups)

    @signed_in
    def flow_page(request: Request, session: Session):
        job = call(platform.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=request.path_params["job_id"]), session).job
        if job.kind != "design.flows.sample":
            raise PageNotFound()
        result = to_dict(job.result)
        # the job's per-iteration statistics (name -> one value per iteration) as a table; the rest as JSON
        series = result.get("per_iteration")
        per_iteration = {k: v for k, v in series.items() if isinstance(v, list)} if isinstance(series, dict) else {}
        rows = min((len(v) for v in per_iteration.values()), default=0)
        summary = {k: v for k, v in result.items() if k != "per_iteration" or not per_iteration}
        return render(request, "flow.html", session=session, job=job, params=to_dict(job.params), summary=summary,
                      per_iteration=per_iteration, per_iteration_rows=rows)

    # ------------------------------------------------------------------------------------------ unlearning
    @signed_in
    def records_page(request: Request, session: Session):
        q = request.query_params
        listed = call(platform.unlearning.ListUnlearningRecords, unlearning_pb2.ListUnlearningRecordsRequest(
            page_size=PAGE_SIZE, page_token=q.get("page", ""), model_name=q.get("model", "").strip()), session)
        return render(request, "records.html", session=session, records=listed.records, model=q.get("model", ""),
                      method_name=method_name,
                      next_page=f"/unlearning?{urlencode({'model': q.get('model', ''), 'page': listed.next_page_token})}"
                      if listed.next_page_token else "")

    @signed_in
    def record_page(request: Request, session: Session):
        record_id = request.path_params["record_id"]
        record = call(platform.unlearning.GetUnlearningRecord, unlearning_pb2.GetUnlearningRecordRequest(
            record_id=record_id), session).record
        report, job_report = None, None
        if state_name(record.state) == "SUCCEEDED":
            got = call(platform.unlearning.GetUnlearningReport, unlearning_pb2.GetUnlearningReportRequest(
                record_id=record_id), session)
            report = json.loads(got.report_json) if got.report_json else None
            job_report = got.job_report if got.HasField("job_report") else None
        return render(request, "record.html", session=session, record=record, report=report, job_report=job_report,
                      method_name=method_name, certificate=to_dict(record.certificate),
                      guarantee=to_dict(record.guarantee), audits=[to_dict(a) for a in record.audits])

    def home(request: Request):
        return RedirectResponse("/jobs", 303)

    def health(request: Request):
        return PlainTextResponse("ok")

    routes = [
        Route("/", home), Route("/healthz", health),
        Route("/signin", signin, methods=["GET", "POST"]), Route("/signout", signout, methods=["POST"]),
        Route("/jobs", jobs_page), Route("/jobs/{job_id}", job_page),
        Route("/jobs/{job_id}/cancel", cancel_page, methods=["GET", "POST"]), Route("/watch", watch),
        Route("/artifacts/{artifact_id}", artifact_download), Route("/artifacts/{artifact_id}/inline", artifact_inline),
        Route("/models", models_page), Route("/models/{name}", model_page),
        Route("/campaigns", campaigns_page), Route("/campaigns/{campaign_id}", campaign_page),
        Route("/campaigns/{campaign_id}/plot.png", campaign_plot),
        Route("/crystals", job_list("design.crystals.generate", "crystals.html")),
        Route("/crystals/{job_id}", crystal_page),
        Route("/flows", job_list("design.flows.sample", "flows.html")), Route("/flows/{job_id}", flow_page),
        Route("/unlearning", records_page), Route("/unlearning/{record_id}", record_page),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes)
    app.state.platform = platform
    return app


def _to_signin(request: Request, reason: str = "") -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    query = {"next": target, **({"reason": reason} if reason else {})}
    response = RedirectResponse(f"/signin?{urlencode(query)}", 303)
    if reason:
        response.delete_cookie(COOKIE, path="/")
    return response


def _safe_next(target: str | None) -> str:
    """Where to go after signing in: a path on this console only (never another site)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/jobs"
    return target


def _form(request: Request) -> dict[str, str]:
    """The urlencoded body of a POST (the pages' forms), read synchronously in a handler's thread."""
    from urllib.parse import parse_qsl

    import anyio.from_thread

    body = anyio.from_thread.run(request.body)
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


def _artifact_request(request: Request):
    from praxon.artifacts.v1 import artifacts_pb2

    return artifacts_pb2.GetArtifactRequest(artifact_id=request.path_params["artifact_id"])


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
