from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StartEchoJobRequest(_message.Message):
    __slots__ = ("n",)
    N_FIELD_NUMBER: _ClassVar[int]
    n: int
    def __init__(self, n: _Optional[int] = ...) -> None: ...

class StartEchoJobResponse(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListCountsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListCountsResponse(_message.Message):
    __slots__ = ("counts",)
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    counts: _containers.RepeatedCompositeFieldContainer[Count]
    def __init__(self, counts: _Optional[_Iterable[_Union[Count, _Mapping]]] = ...) -> None: ...

class Count(_message.Message):
    __slots__ = ("job_id", "counted")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    COUNTED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    counted: int
    def __init__(self, job_id: _Optional[str] = ..., counted: _Optional[int] = ...) -> None: ...
