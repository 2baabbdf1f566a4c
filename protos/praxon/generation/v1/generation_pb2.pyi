from praxon.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class UncertaintyMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNCERTAINTY_METHOD_UNSPECIFIED: _ClassVar[UncertaintyMethod]
    UNCERTAINTY_METHOD_MULTINOMIAL_SAMPLING: _ClassVar[UncertaintyMethod]
    UNCERTAINTY_METHOD_SDLG: _ClassVar[UncertaintyMethod]
UNCERTAINTY_METHOD_UNSPECIFIED: UncertaintyMethod
UNCERTAINTY_METHOD_MULTINOMIAL_SAMPLING: UncertaintyMethod
UNCERTAINTY_METHOD_SDLG: UncertaintyMethod

class KvCompression(_message.Message):
    __slots__ = ("retention", "threshold", "window")
    RETENTION_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    retention: float
    threshold: float
    window: int
    def __init__(self, retention: _Optional[float] = ..., threshold: _Optional[float] = ..., window: _Optional[int] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("model", "prompt", "max_new_tokens", "uncertainty", "num_alternatives", "kv_compression")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    UNCERTAINTY_FIELD_NUMBER: _ClassVar[int]
    NUM_ALTERNATIVES_FIELD_NUMBER: _ClassVar[int]
    KV_COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    prompt: str
    max_new_tokens: int
    uncertainty: UncertaintyMethod
    num_alternatives: int
    kv_compression: KvCompression
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., prompt: _Optional[str] = ..., max_new_tokens: _Optional[int] = ..., uncertainty: _Optional[_Union[UncertaintyMethod, str]] = ..., num_alternatives: _Optional[int] = ..., kv_compression: _Optional[_Union[KvCompression, _Mapping]] = ...) -> None: ...

class SemanticCluster(_message.Message):
    __slots__ = ("answers", "probability")
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    answers: _containers.RepeatedScalarFieldContainer[str]
    probability: float
    def __init__(self, answers: _Optional[_Iterable[str]] = ..., probability: _Optional[float] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("text", "semantic_entropy", "clusters", "kv_retained_fraction")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SEMANTIC_ENTROPY_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    KV_RETAINED_FRACTION_FIELD_NUMBER: _ClassVar[int]
    text: str
    semantic_entropy: float
    clusters: _containers.RepeatedCompositeFieldContainer[SemanticCluster]
    kv_retained_fraction: float
    def __init__(self, text: _Optional[str] = ..., semantic_entropy: _Optional[float] = ..., clusters: _Optional[_Iterable[_Union[SemanticCluster, _Mapping]]] = ..., kv_retained_fraction: _Optional[float] = ...) -> None: ...

class Document(_message.Message):
    __slots__ = ("id", "text")
    ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    id: str
    text: str
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class AnswerWithRetrievalRequest(_message.Message):
    __slots__ = ("verifier", "drafter", "question", "documents", "num_drafts", "num_clusters")
    VERIFIER_FIELD_NUMBER: _ClassVar[int]
    DRAFTER_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFTS_FIELD_NUMBER: _ClassVar[int]
    NUM_CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    verifier: _common_pb2.ModelRef
    drafter: _common_pb2.ModelRef
    question: str
    documents: _containers.RepeatedCompositeFieldContainer[Document]
    num_drafts: int
    num_clusters: int
    def __init__(self, verifier: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., drafter: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., question: _Optional[str] = ..., documents: _Optional[_Iterable[_Union[Document, _Mapping]]] = ..., num_drafts: _Optional[int] = ..., num_clusters: _Optional[int] = ...) -> None: ...

class Draft(_message.Message):
    __slots__ = ("answer", "rationale", "document_ids", "log_score")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    RATIONALE_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_IDS_FIELD_NUMBER: _ClassVar[int]
    LOG_SCORE_FIELD_NUMBER: _ClassVar[int]
    answer: str
    rationale: str
    document_ids: _containers.RepeatedScalarFieldContainer[str]
    log_score: float
    def __init__(self, answer: _Optional[str] = ..., rationale: _Optional[str] = ..., document_ids: _Optional[_Iterable[str]] = ..., log_score: _Optional[float] = ...) -> None: ...

class AnswerWithRetrievalResponse(_message.Message):
    __slots__ = ("answer", "drafts")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    DRAFTS_FIELD_NUMBER: _ClassVar[int]
    answer: str
    drafts: _containers.RepeatedCompositeFieldContainer[Draft]
    def __init__(self, answer: _Optional[str] = ..., drafts: _Optional[_Iterable[_Union[Draft, _Mapping]]] = ...) -> None: ...

class StartLanguageModelTrainingJobRequest(_message.Message):
    __slots__ = ("corpus_artifact_id", "model_name", "idempotency_key")
    CORPUS_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    corpus_artifact_id: str
    model_name: str
    idempotency_key: str
    def __init__(self, corpus_artifact_id: _Optional[str] = ..., model_name: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class StartLanguageModelTrainingJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...
