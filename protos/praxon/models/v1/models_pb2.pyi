import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from praxon.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ModelVersion(_message.Message):
    __slots__ = ("id", "name", "version", "kind", "aliases", "config", "metrics", "weights", "producing_job_id", "parent_version_ids", "dataset_artifact_id", "create_time")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    PRODUCING_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_VERSION_IDS_FIELD_NUMBER: _ClassVar[int]
    DATASET_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    version: int
    kind: str
    aliases: _containers.RepeatedScalarFieldContainer[str]
    config: _struct_pb2.Struct
    metrics: _containers.ScalarMap[str, float]
    weights: _common_pb2.ArtifactRef
    producing_job_id: str
    parent_version_ids: _containers.RepeatedScalarFieldContainer[str]
    dataset_artifact_id: str
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[int] = ..., kind: _Optional[str] = ..., aliases: _Optional[_Iterable[str]] = ..., config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., metrics: _Optional[_Mapping[str, float]] = ..., weights: _Optional[_Union[_common_pb2.ArtifactRef, _Mapping]] = ..., producing_job_id: _Optional[str] = ..., parent_version_ids: _Optional[_Iterable[str]] = ..., dataset_artifact_id: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Model(_message.Message):
    __slots__ = ("name", "latest", "aliases")
    class AliasesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    name: str
    latest: ModelVersion
    aliases: _containers.ScalarMap[str, int]
    def __init__(self, name: _Optional[str] = ..., latest: _Optional[_Union[ModelVersion, _Mapping]] = ..., aliases: _Optional[_Mapping[str, int]] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models", "next_page_token")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[Model]
    next_page_token: str
    def __init__(self, models: _Optional[_Iterable[_Union[Model, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListModelVersionsRequest(_message.Message):
    __slots__ = ("name", "page_size", "page_token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    page_size: int
    page_token: str
    def __init__(self, name: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListModelVersionsResponse(_message.Message):
    __slots__ = ("versions", "next_page_token")
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[ModelVersion]
    next_page_token: str
    def __init__(self, versions: _Optional[_Iterable[_Union[ModelVersion, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetModelVersionRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ...) -> None: ...

class GetModelVersionResponse(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: ModelVersion
    def __init__(self, version: _Optional[_Union[ModelVersion, _Mapping]] = ...) -> None: ...

class GetLineageRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ...) -> None: ...

class GetLineageResponse(_message.Message):
    __slots__ = ("versions", "jobs", "datasets")
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    DATASETS_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[ModelVersion]
    jobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.Job]
    datasets: _containers.RepeatedCompositeFieldContainer[_common_pb2.ArtifactRef]
    def __init__(self, versions: _Optional[_Iterable[_Union[ModelVersion, _Mapping]]] = ..., jobs: _Optional[_Iterable[_Union[_common_pb2.Job, _Mapping]]] = ..., datasets: _Optional[_Iterable[_Union[_common_pb2.ArtifactRef, _Mapping]]] = ...) -> None: ...

class SetAliasRequest(_message.Message):
    __slots__ = ("name", "alias", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALIAS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    alias: str
    version: int
    def __init__(self, name: _Optional[str] = ..., alias: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class SetAliasResponse(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: ModelVersion
    def __init__(self, version: _Optional[_Union[ModelVersion, _Mapping]] = ...) -> None: ...
