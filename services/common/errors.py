"""The project's error types. Domain code raises these; one gRPC interceptor maps them to status codes
with rich details (google.rpc.Status + ErrorInfo/BadRequest/RetryInfo). Anything else is a server bug and
becomes INTERNAL."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldViolation:
    field: str
    description: str


class PraxonError(Exception):
    """Base class. `reason` is an UPPER_SNAKE machine-readable code (ErrorInfo.reason)."""

    reason = "PRAXON_ERROR"

    def __init__(self, message: str, *, reason: str | None = None, metadata: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        if reason:
            self.reason = reason
        self.metadata = dict(metadata or {})


class InvalidArgument(PraxonError):
    """Bad input from the caller. Carries one or more field violations."""

    reason = "INVALID_ARGUMENT"

    def __init__(self, field: str | None = None, description: str = "", *,
                 violations: list[FieldViolation] | None = None, reason: str | None = None):
        vs = list(violations or [])
        if field is not None:
            vs.insert(0, FieldViolation(field, description))
        if not vs:
            raise ValueError("InvalidArgument needs at least one field violation")
        super().__init__("; ".join(f"{v.field}: {v.description}" for v in vs), reason=reason)
        self.violations = vs


class NotFound(PraxonError):
    """The thing does not exist, or belongs to another tenant (we never say which)."""

    reason = "NOT_FOUND"


class AlreadyExists(PraxonError):
    reason = "ALREADY_EXISTS"


class FailedPrecondition(PraxonError):
    reason = "FAILED_PRECONDITION"


class Unauthenticated(PraxonError):
    reason = "UNAUTHENTICATED"


class Unavailable(PraxonError):
    """Transient: the caller may retry after `retry_after_s`."""

    reason = "UNAVAILABLE"

    def __init__(self, message: str, *, retry_after_s: float = 1.0, reason: str | None = None):
        super().__init__(message, reason=reason)
        self.retry_after_s = retry_after_s


class ResourceExhausted(PraxonError):
    """Over a limit (a full queue, a tenant's quota): the caller may retry after `retry_after_s`."""

    reason = "RESOURCE_EXHAUSTED"

    def __init__(self, message: str, *, retry_after_s: float = 1.0, reason: str | None = None):
        super().__init__(message, reason=reason)
        self.retry_after_s = retry_after_s


class Cancelled(PraxonError):
    """Raised inside a job when its cancellation was requested."""

    reason = "CANCELLED"


class IntegrityError(PraxonError):
    """Stored bytes do not match their recorded sha256."""

    reason = "ARTIFACT_CORRUPTED"
