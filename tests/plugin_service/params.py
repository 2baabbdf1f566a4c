from pydantic import Field

from services.common.params import JobParams


class CountParams(JobParams):
    """echo.count: how far to count."""

    n: int = Field(3, ge=1, le=1000)
