"""Errors -> gRPC status: project errors (services.common.errors) become their code with google.rpc details
(ErrorInfo with the request id, BadRequest field violations, RetryInfo); a database or object store that is down
becomes UNAVAILABLE; anything else INTERNAL with the request id only (the traceback goes to the log)."""
from __future__ import annotations

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from services.common.errors import (AlreadyExists, Cancelled, FailedPrecondition, InvalidArgument, NotFound,
                                    PraxonError, ResourceExhausted, Unauthenticated, Unavailable)
from services.common.store import transient

DOMAIN = "praxon.dev"
_CODES: list[tuple[type[PraxonError], grpc.StatusCode]] = [
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT), (NotFound, grpc.StatusCode.NOT_FOUND),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS), (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED), (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (Cancelled, grpc.StatusCode.CANCELLED), (ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
]


def _pack(msg) -> any_pb2.Any:
    out = any_pb2.Any()
    out.Pack(msg)
    return out


def _backing_service_down(exc: BaseException) -> bool:
    """The database or the object store could not be reached, failed transiently or is full: the caller should
    retry (later)."""
    from minio.error import S3Error

    return transient(exc) or (isinstance(exc, S3Error) and exc.code == "XMinioStorageFull")


def to_status(exc: BaseException, request_id: str) -> grpc.Status:
    if not isinstance(exc, PraxonError) and _backing_service_down(exc):
        exc = Unavailable(f"a backing service (database or object store) is unavailable; retry (request id "
                          f"{request_id})", retry_after_s=2.0, reason="BACKEND_UNAVAILABLE")
    if isinstance(exc, PraxonError):
        code = next((c for t, c in _CODES if isinstance(exc, t)), grpc.StatusCode.INTERNAL)
        message = exc.message
        details = [_pack(error_details_pb2.ErrorInfo(reason=exc.reason, domain=DOMAIN,
                                                     metadata={**exc.metadata, "request_id": request_id}))]
        if isinstance(exc, InvalidArgument):
            details.append(_pack(error_details_pb2.BadRequest(field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
                for v in exc.violations])))
        if isinstance(exc, (Unavailable, ResourceExhausted)):
            delay = duration_pb2.Duration()
            delay.FromNanoseconds(int(exc.retry_after_s * 1e9))
            details.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
    else:
        code = grpc.StatusCode.INTERNAL
        message = f"internal error (request id {request_id})"
        details = [_pack(error_details_pb2.ErrorInfo(reason="INTERNAL", domain=DOMAIN,
                                                     metadata={"request_id": request_id}))]
    status = status_pb2.Status(code=getattr(code_pb2, code.name), message=message, details=details)
    return rpc_status.to_status(status)

