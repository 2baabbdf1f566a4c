from praxon.common.v1 import common_pb2 as _common_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class UploadArtifactRequest(_message.Message):
    __slots__ = ("name", "content_type", "chunk", "sha256")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    name: str
    content_type: str
    chunk: bytes
    sha256: str
    def __init__(self, name: _Optional[str] = ..., content_type: _Optional[str] = ..., chunk: _Optional[bytes] = ..., sha256: _Optional[str] = ...) -> None: ...

class UploadArtifactResponse(_message.Message):
    __slots__ = ("artifact",)
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    artifact: _common_pb2.ArtifactRef
    def __init__(self, artifact: _Optional[_Union[_common_pb2.ArtifactRef, _Mapping]] = ...) -> None: ...

class CreateUploadRequest(_message.Message):
    __slots__ = ("name", "content_type", "sha256")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    name: str
    content_type: str
    sha256: str
    def __init__(self, name: _Optional[str] = ..., content_type: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...

class CreateUploadResponse(_message.Message):
    __slots__ = ("upload_id", "url", "expires_in_seconds")
    UPLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_IN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    upload_id: str
    url: str
    expires_in_seconds: int
    def __init__(self, upload_id: _Optional[str] = ..., url: _Optional[str] = ..., expires_in_seconds: _Optional[int] = ...) -> None: ...

class CompleteUploadRequest(_message.Message):
    __slots__ = ("upload_id",)
    UPLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    upload_id: str
    def __init__(self, upload_id: _Optional[str] = ...) -> None: ...

class CompleteUploadResponse(_message.Message):
    __slots__ = ("artifact",)
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    artifact: _common_pb2.ArtifactRef
    def __init__(self, artifact: _Optional[_Union[_common_pb2.ArtifactRef, _Mapping]] = ...) -> None: ...

class GetArtifactRequest(_message.Message):
    __slots__ = ("artifact_id",)
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    def __init__(self, artifact_id: _Optional[str] = ...) -> None: ...

class GetArtifactResponse(_message.Message):
    __slots__ = ("artifact", "url", "expires_in_seconds")
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_IN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    artifact: _common_pb2.ArtifactRef
    url: str
    expires_in_seconds: int
    def __init__(self, artifact: _Optional[_Union[_common_pb2.ArtifactRef, _Mapping]] = ..., url: _Optional[str] = ..., expires_in_seconds: _Optional[int] = ...) -> None: ...
