"""Platform servicers: JobService (follow and cancel any job, the self-test job), ModelRegistryService and
ArtifactService. Proto <-> domain translation only; the logic is in services/common."""
from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from typing import AsyncIterator

import grpc

from praxon.artifacts.v1 import artifacts_pb2, artifacts_pb2_grpc
from praxon.jobs.v1 import jobs_pb2, jobs_pb2_grpc
from praxon.models.v1 import models_pb2, models_pb2_grpc
from services.common import convert
from services.common.errors import InvalidArgument, NotFound
from services.common.jobs import TERMINAL, page_size, parse_uuid
from services.common.server import AppContext, current_tenant
from services.common.store import sha256_hex
from services.platform.events import JobEventHub

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
CONTENT_TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,63}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
                             r"(\s*;\s*[A-Za-z0-9_.-]+=[A-Za-z0-9_.-]+)*$")
MAX_UPLOAD_BYTES = 1 << 30


def check_artifact_fields(name: str, content_type: str) -> tuple[str, str]:
    if not name:
        raise InvalidArgument("name", "required")
    if len(name) > 512 or not name.isprintable():
        raise InvalidArgument("name", "at most 512 printable characters")
    if content_type and not CONTENT_TYPE_RE.match(content_type):
        raise InvalidArgument("content_type", "a MIME type such as text/csv or application/octet-stream")
    return name, content_type or "application/octet-stream"


def _offset_token(token: str) -> int:
    if not token:
        return 0
    try:
        value = json.loads(base64.urlsafe_b64decode(token.encode()))["o"]
        if not isinstance(value, int) or value < 0:
            raise ValueError
        return value
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeError):
        raise InvalidArgument("page_token", "malformed page token") from None


def _next_offset_token(offset: int, size: int, got: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"o": offset + size}).encode()).decode() if got > size else ""


class JobServicer(jobs_pb2_grpc.JobServiceServicer):
    def __init__(self, app: AppContext, hub: JobEventHub):
        self.app, self.hub = app, hub

    async def _job_message(self, row: dict):
        arts, models = await self.app.db(self.app.jobs.outputs, row["id"])
        return convert.job(row, arts, models)

    async def GetJob(self, request, context):
        row = await self.app.db(self.app.jobs.get, current_tenant(), request.job_id)
        return jobs_pb2.GetJobResponse(job=await self._job_message(row))

    async def ListJobs(self, request, context):
        size = page_size(request.page_size)
        states = convert.state_filter(request.states)
        rows, token = await self.app.db(lambda: self.app.jobs.list(current_tenant(), size=size,
                                                                   token=request.page_token, states=states,
                                                                   kind=request.kind,
                                                                   parent_job_id=request.parent_job_id))
        outputs = await self.app.db(self.app.jobs.outputs_of, [r["id"] for r in rows])
        return jobs_pb2.ListJobsResponse(jobs=[convert.job(r, *outputs[str(r["id"])]) for r in rows],
                                         next_page_token=token)

    async def CancelJob(self, request, context):
        row = await self.app.db(self.app.jobs.cancel, current_tenant(), request.job_id)
        return jobs_pb2.CancelJobResponse(job=await self._job_message(row))

    async def WatchJob(self, request, context) -> AsyncIterator[jobs_pb2.WatchJobResponse]:
        if request.after_sequence < 0:
            raise InvalidArgument("after_sequence", "must be >= 0")
        job = await self.app.db(self.app.jobs.get, current_tenant(), request.job_id)
        job_id = str(job["id"])
        await self.hub.start()
        wake = self.hub.subscribe(job_id)  # subscribe before reading, so no event falls between
        try:
            last = request.after_sequence
            while True:
                wake.clear()
                events = await self.app.db(self.app.jobs.events_after, job_id, last)
                for row in events:
                    yield jobs_pb2.WatchJobResponse(event=convert.event(row))
                    last = row["seq"]
                    if row["state"] in TERMINAL:
                        return
                if not events:
                    current = await self.app.db(self.app.jobs.get, current_tenant(), job_id)
                    if current["state"] in TERMINAL:
                        return
                await wake.wait()
        finally:
            self.hub.unsubscribe(job_id, wake)

    async def StartSelfTestJob(self, request, context):
        if not 1 <= request.steps <= 10_000:
            raise InvalidArgument("steps", "must be between 1 and 10000")
        if not 0 <= request.step_seconds <= 60:
            raise InvalidArgument("step_seconds", "must be between 0 and 60")
        row = await self.app.db(lambda: self.app.jobs.submit(
            current_tenant(), "platform.selftest", {"steps": request.steps, "step_seconds": request.step_seconds},
            request.idempotency_key))
        return jobs_pb2.StartSelfTestJobResponse(job=convert.job(row))


class ModelRegistryServicer(models_pb2_grpc.ModelRegistryServiceServicer):
    def __init__(self, app: AppContext):
        self.app = app

    def _version_message(self, tenant: str, row: dict) -> models_pb2.ModelVersion:
        reg = self.app.registry
        weights = reg.get_artifact(tenant, str(row["weights_artifact_id"]))
        return convert.model_version(row, weights, reg.aliases([row["id"]]).get(str(row["id"]), []),
                                     reg.parents(row["id"]))

    def _ref(self, ref, field: str = "model") -> dict:
        if not ref.name:
            raise InvalidArgument(f"{field}.name", "required")
        return self.app.registry.resolve(current_tenant(), ref.name, ref.version, ref.alias, field)

    async def ListModels(self, request, context):
        size, offset = page_size(request.page_size), _offset_token(request.page_token)
        tenant = current_tenant()

        def work():
            with self.app.pool.connection() as conn:
                names = [r["name"] for r in conn.execute(
                    "SELECT DISTINCT m.name FROM models m JOIN model_versions v ON v.model_id = m.id AND v.committed "
                    "WHERE m.tenant_id = %s ORDER BY m.name LIMIT %s OFFSET %s", (tenant, size + 1, offset))]
            out = []
            for name in names[:size]:
                latest = self.app.registry.resolve(tenant, name)
                with self.app.pool.connection() as conn:
                    aliases = {r["alias"]: r["version"] for r in conn.execute(
                        "SELECT a.alias, v.version FROM model_aliases a JOIN model_versions v ON v.id = a.version_id "
                        "WHERE a.model_id = %s", (latest["model_id"],))}
                out.append(models_pb2.Model(name=name, latest=self._version_message(tenant, latest), aliases=aliases))
            return models_pb2.ListModelsResponse(models=out,
                                                 next_page_token=_next_offset_token(offset, size, len(names)))
        return await self.app.db(work)

    async def ListModelVersions(self, request, context):
        size, offset = page_size(request.page_size), _offset_token(request.page_token)
        tenant = current_tenant()

        def work():
            self.app.registry.resolve(tenant, request.name, field="name")  # NOT_FOUND if absent
            with self.app.pool.connection() as conn:
                rows = conn.execute("SELECT v.*, m.name FROM model_versions v JOIN models m ON m.id = v.model_id "
                                    "WHERE m.tenant_id = %s AND m.name = %s AND v.committed "
                                    "ORDER BY v.version DESC LIMIT %s OFFSET %s",
                                    (tenant, request.name, size + 1, offset)).fetchall()
            return models_pb2.ListModelVersionsResponse(
                versions=[self._version_message(tenant, r) for r in rows[:size]],
                next_page_token=_next_offset_token(offset, size, len(rows)))
        return await self.app.db(work)

    async def GetModelVersion(self, request, context):
        return await self.app.db(lambda: models_pb2.GetModelVersionResponse(
            version=self._version_message(current_tenant(), self._ref(request.model))))

    async def GetLineage(self, request, context):
        tenant = current_tenant()

        def work():
            reg = self.app.registry
            seen, queue, versions = set(), [self._ref(request.model)], []
            while queue:
                row = queue.pop(0)
                if row["id"] in seen:
                    continue
                seen.add(row["id"])
                versions.append(row)
                queue += [reg.version_by_id(tenant, p) for p in reg.parents(row["id"])]
            jobs = [self.app.jobs.get(tenant, str(v["producing_job_id"])) for v in versions if v["producing_job_id"]]
            datasets = [reg.get_artifact(tenant, str(v["dataset_artifact_id"]))
                        for v in versions if v["dataset_artifact_id"]]
            return models_pb2.GetLineageResponse(versions=[self._version_message(tenant, v) for v in versions],
                                                 jobs=[convert.job(j) for j in jobs],
                                                 datasets=[convert.artifact(d) for d in datasets])
        return await self.app.db(work)

    async def SetAlias(self, request, context):
        tenant = current_tenant()
        return await self.app.db(lambda: models_pb2.SetAliasResponse(version=self._version_message(
            tenant, self.app.registry.set_alias(tenant, request.name, request.alias, request.version))))


class ArtifactServicer(artifacts_pb2_grpc.ArtifactServiceServicer):
    def __init__(self, app: AppContext):
        self.app = app

    async def UploadArtifact(self, request_iterator, context):
        tenant, first, chunks, total = current_tenant(), None, [], 0
        async for message in request_iterator:
            if first is None:
                first = message
            total += len(message.chunk)
            if total > MAX_UPLOAD_BYTES:
                raise InvalidArgument("chunk", f"upload exceeds {MAX_UPLOAD_BYTES} bytes; use CreateUpload")
            chunks.append(message.chunk)
        if first is None:
            raise InvalidArgument("name", "required in the first message")
        name, content_type = check_artifact_fields(first.name, first.content_type)
        if first.sha256 and not SHA256_RE.match(first.sha256):
            raise InvalidArgument("sha256", "64 lowercase hex characters")
        data = b"".join(chunks)
        if first.sha256 and sha256_hex(data) != first.sha256:
            raise InvalidArgument("sha256", "content does not match the declared sha256")

        def work():
            with self.app.pool.connection() as conn:
                return self.app.registry.put_artifact(conn, tenant, name, data, content_type)
        return artifacts_pb2.UploadArtifactResponse(artifact=convert.artifact(await self.app.db(work)))

    async def CreateUpload(self, request, context):
        name, content_type = check_artifact_fields(request.name, request.content_type)
        if not SHA256_RE.match(request.sha256):
            raise InvalidArgument("sha256", "64 lowercase hex characters")
        tenant, upload_id = current_tenant(), str(uuid.uuid4())
        key = f"tenants/{tenant}/uploads/{upload_id}"
        seconds = self.app.settings.s3.presign_seconds

        def work():
            with self.app.pool.connection() as conn:
                conn.execute("INSERT INTO uploads (id, tenant_id, name, content_type, sha256, object_key, expires_at) "
                             "VALUES (%s, %s, %s, %s, %s, %s, now() + make_interval(secs => %s))",
                             (upload_id, tenant, name, content_type, request.sha256, key, seconds))
            return self.app.store.presigned_put(key)
        url = await self.app.db(work)
        return artifacts_pb2.CreateUploadResponse(upload_id=upload_id, url=url, expires_in_seconds=seconds)

    async def CompleteUpload(self, request, context):
        tenant, upload_id = current_tenant(), parse_uuid(request.upload_id, "upload_id")

        def work():
            with self.app.pool.connection() as conn:
                up = conn.execute("SELECT * FROM uploads WHERE id = %s AND tenant_id = %s FOR UPDATE",
                                  (upload_id, tenant)).fetchone()
                if up is None:
                    raise NotFound(f"upload {upload_id} not found")
                try:
                    data = self.app.store.get_bytes(up["object_key"])
                except NotFound:
                    raise InvalidArgument("upload_id", "nothing was uploaded to the presigned URL") from None
                if sha256_hex(data) != up["sha256"]:
                    raise InvalidArgument("upload_id", "uploaded content does not match the declared sha256")
                key, digest = self.app.store.put_blob(tenant, data, up["content_type"])
                row = self.app.registry.record_artifact(conn, tenant, up["name"], key, digest, len(data),
                                                        up["content_type"])
                conn.execute("DELETE FROM uploads WHERE id = %s", (upload_id,))
            self.app.store.delete(up["object_key"])
            return row
        return artifacts_pb2.CompleteUploadResponse(artifact=convert.artifact(await self.app.db(work)))

    async def GetArtifact(self, request, context):
        tenant = current_tenant()

        def work():
            row = self.app.registry.get_artifact(tenant, request.artifact_id)
            # Private artifacts (e.g. certified unlearning's pre-noise state) are for jobs only: downloading them
            # would void the certificate.
            if row["metadata"].get("visibility") == "private":
                raise NotFound(f"artifact {request.artifact_id} not found")
            return row, self.app.store.presigned_get(row["object_key"])
        row, url = await self.app.db(work)
        return artifacts_pb2.GetArtifactResponse(artifact=convert.artifact(row), url=url,
                                                 expires_in_seconds=self.app.settings.s3.presign_seconds)


def register(server: grpc.aio.Server, app: AppContext) -> list[str]:
    hub = app.extras.get("event_hub")
    if hub is None:
        hub = app.extras["event_hub"] = JobEventHub(app.settings.database_url.get_secret_value())
    jobs_pb2_grpc.add_JobServiceServicer_to_server(JobServicer(app, hub), server)
    models_pb2_grpc.add_ModelRegistryServiceServicer_to_server(ModelRegistryServicer(app), server)
    artifacts_pb2_grpc.add_ArtifactServiceServicer_to_server(ArtifactServicer(app), server)
    return [jobs_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
            models_pb2.DESCRIPTOR.services_by_name["ModelRegistryService"].full_name,
            artifacts_pb2.DESCRIPTOR.services_by_name["ArtifactService"].full_name]
