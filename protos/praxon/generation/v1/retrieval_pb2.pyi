from praxon.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RagMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RAG_METHOD_UNSPECIFIED: _ClassVar[RagMethod]
    RAG_METHOD_STANDARD: _ClassVar[RagMethod]
    RAG_METHOD_SPECULATIVE: _ClassVar[RagMethod]
    RAG_METHOD_SPARSE: _ClassVar[RagMethod]
RAG_METHOD_UNSPECIFIED: RagMethod
RAG_METHOD_STANDARD: RagMethod
RAG_METHOD_SPECULATIVE: RagMethod
RAG_METHOD_SPARSE: RagMethod

class Collection(_message.Message):
    __slots__ = ("id", "name", "document_count", "chunk_count", "index")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    document_count: int
    chunk_count: int
    index: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., document_count: _Optional[int] = ..., chunk_count: _Optional[int] = ..., index: _Optional[str] = ...) -> None: ...

class CreateCollectionRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CreateCollectionResponse(_message.Message):
    __slots__ = ("collection",)
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    collection: Collection
    def __init__(self, collection: _Optional[_Union[Collection, _Mapping]] = ...) -> None: ...

class ListCollectionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListCollectionsResponse(_message.Message):
    __slots__ = ("collections",)
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    collections: _containers.RepeatedCompositeFieldContainer[Collection]
    def __init__(self, collections: _Optional[_Iterable[_Union[Collection, _Mapping]]] = ...) -> None: ...

class DocumentInput(_message.Message):
    __slots__ = ("external_id", "title", "text")
    EXTERNAL_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    external_id: str
    title: str
    text: str
    def __init__(self, external_id: _Optional[str] = ..., title: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class StartIndexingJobRequest(_message.Message):
    __slots__ = ("collection", "documents", "chunk_chars", "overlap_chars", "idempotency_key")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_CHARS_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_CHARS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    collection: str
    documents: _containers.RepeatedCompositeFieldContainer[DocumentInput]
    chunk_chars: int
    overlap_chars: int
    idempotency_key: str
    def __init__(self, collection: _Optional[str] = ..., documents: _Optional[_Iterable[_Union[DocumentInput, _Mapping]]] = ..., chunk_chars: _Optional[int] = ..., overlap_chars: _Optional[int] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class StartIndexingJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class Document(_message.Message):
    __slots__ = ("external_id", "title", "text", "status", "chunk_count")
    EXTERNAL_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    external_id: str
    title: str
    text: str
    status: str
    chunk_count: int
    def __init__(self, external_id: _Optional[str] = ..., title: _Optional[str] = ..., text: _Optional[str] = ..., status: _Optional[str] = ..., chunk_count: _Optional[int] = ...) -> None: ...

class GetDocumentRequest(_message.Message):
    __slots__ = ("collection", "external_id")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_ID_FIELD_NUMBER: _ClassVar[int]
    collection: str
    external_id: str
    def __init__(self, collection: _Optional[str] = ..., external_id: _Optional[str] = ...) -> None: ...

class GetDocumentResponse(_message.Message):
    __slots__ = ("document",)
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    document: Document
    def __init__(self, document: _Optional[_Union[Document, _Mapping]] = ...) -> None: ...

class DeleteDocumentRequest(_message.Message):
    __slots__ = ("collection", "external_id")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_ID_FIELD_NUMBER: _ClassVar[int]
    collection: str
    external_id: str
    def __init__(self, collection: _Optional[str] = ..., external_id: _Optional[str] = ...) -> None: ...

class DeleteDocumentResponse(_message.Message):
    __slots__ = ("chunks_removed",)
    CHUNKS_REMOVED_FIELD_NUMBER: _ClassVar[int]
    chunks_removed: int
    def __init__(self, chunks_removed: _Optional[int] = ...) -> None: ...

class SearchHit(_message.Message):
    __slots__ = ("external_id", "title", "chunk_index", "text", "score")
    EXTERNAL_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    external_id: str
    title: str
    chunk_index: int
    text: str
    score: float
    def __init__(self, external_id: _Optional[str] = ..., title: _Optional[str] = ..., chunk_index: _Optional[int] = ..., text: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class SearchRequest(_message.Message):
    __slots__ = ("collection", "query", "k")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    collection: str
    query: str
    k: int
    def __init__(self, collection: _Optional[str] = ..., query: _Optional[str] = ..., k: _Optional[int] = ...) -> None: ...

class SearchResponse(_message.Message):
    __slots__ = ("hits", "index")
    HITS_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedCompositeFieldContainer[SearchHit]
    index: str
    def __init__(self, hits: _Optional[_Iterable[_Union[SearchHit, _Mapping]]] = ..., index: _Optional[str] = ...) -> None: ...

class Draft(_message.Message):
    __slots__ = ("external_ids", "answer", "rationale", "log_draft", "log_self_consistency", "log_self_reflection", "log_score")
    EXTERNAL_IDS_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    RATIONALE_FIELD_NUMBER: _ClassVar[int]
    LOG_DRAFT_FIELD_NUMBER: _ClassVar[int]
    LOG_SELF_CONSISTENCY_FIELD_NUMBER: _ClassVar[int]
    LOG_SELF_REFLECTION_FIELD_NUMBER: _ClassVar[int]
    LOG_SCORE_FIELD_NUMBER: _ClassVar[int]
    external_ids: _containers.RepeatedScalarFieldContainer[str]
    answer: str
    rationale: str
    log_draft: float
    log_self_consistency: float
    log_self_reflection: float
    log_score: float
    def __init__(self, external_ids: _Optional[_Iterable[str]] = ..., answer: _Optional[str] = ..., rationale: _Optional[str] = ..., log_draft: _Optional[float] = ..., log_self_consistency: _Optional[float] = ..., log_self_reflection: _Optional[float] = ..., log_score: _Optional[float] = ...) -> None: ...

class DocumentRating(_message.Message):
    __slots__ = ("external_id", "relevance", "kept")
    EXTERNAL_ID_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_FIELD_NUMBER: _ClassVar[int]
    KEPT_FIELD_NUMBER: _ClassVar[int]
    external_id: str
    relevance: float
    kept: bool
    def __init__(self, external_id: _Optional[str] = ..., relevance: _Optional[float] = ..., kept: _Optional[bool] = ...) -> None: ...

class AnswerWithRetrievalRequest(_message.Message):
    __slots__ = ("question", "collection", "method", "k", "model", "verifier", "drafts", "clusters", "relevance_threshold", "max_new_tokens", "seed")
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    VERIFIER_FIELD_NUMBER: _ClassVar[int]
    DRAFTS_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    MAX_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    question: str
    collection: str
    method: RagMethod
    k: int
    model: _common_pb2.ModelRef
    verifier: _common_pb2.ModelRef
    drafts: int
    clusters: int
    relevance_threshold: float
    max_new_tokens: int
    seed: int
    def __init__(self, question: _Optional[str] = ..., collection: _Optional[str] = ..., method: _Optional[_Union[RagMethod, str]] = ..., k: _Optional[int] = ..., model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., verifier: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., drafts: _Optional[int] = ..., clusters: _Optional[int] = ..., relevance_threshold: _Optional[float] = ..., max_new_tokens: _Optional[int] = ..., seed: _Optional[int] = ...) -> None: ...

class AnswerWithRetrievalResponse(_message.Message):
    __slots__ = ("answer", "documents_used", "documents_retrieved", "drafts", "ratings", "method", "seconds")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_USED_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_RETRIEVED_FIELD_NUMBER: _ClassVar[int]
    DRAFTS_FIELD_NUMBER: _ClassVar[int]
    RATINGS_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    answer: str
    documents_used: _containers.RepeatedScalarFieldContainer[str]
    documents_retrieved: _containers.RepeatedScalarFieldContainer[str]
    drafts: _containers.RepeatedCompositeFieldContainer[Draft]
    ratings: _containers.RepeatedCompositeFieldContainer[DocumentRating]
    method: RagMethod
    seconds: float
    def __init__(self, answer: _Optional[str] = ..., documents_used: _Optional[_Iterable[str]] = ..., documents_retrieved: _Optional[_Iterable[str]] = ..., drafts: _Optional[_Iterable[_Union[Draft, _Mapping]]] = ..., ratings: _Optional[_Iterable[_Union[DocumentRating, _Mapping]]] = ..., method: _Optional[_Union[RagMethod, str]] = ..., seconds: _Optional[float] = ...) -> None: ...
