import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from praxon.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DatasetFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DATASET_FORMAT_UNSPECIFIED: _ClassVar[DatasetFormat]
    DATASET_FORMAT_PRAXON: _ClassVar[DatasetFormat]
    DATASET_FORMAT_BINGOGUARD: _ClassVar[DatasetFormat]
    DATASET_FORMAT_WILDGUARDMIX: _ClassVar[DatasetFormat]

class GuardKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GUARD_KIND_UNSPECIFIED: _ClassVar[GuardKind]
    GUARD_KIND_FROZEN_LINEAR: _ClassVar[GuardKind]
    GUARD_KIND_FINETUNE: _ClassVar[GuardKind]
    GUARD_KIND_GEMMA_FROZEN: _ClassVar[GuardKind]
    GUARD_KIND_GEMMA_LORA: _ClassVar[GuardKind]

class GuardPooling(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GUARD_POOLING_UNSPECIFIED: _ClassVar[GuardPooling]
    GUARD_POOLING_MEAN: _ClassVar[GuardPooling]
    GUARD_POOLING_LAST: _ClassVar[GuardPooling]

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_PROMPT: _ClassVar[Role]
    ROLE_RESPONSE: _ClassVar[Role]

class RuleKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RULE_KIND_UNSPECIFIED: _ClassVar[RuleKind]
    RULE_KIND_BLOCKED: _ClassVar[RuleKind]
    RULE_KIND_ALLOWED: _ClassVar[RuleKind]

class FairnessMetric(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAIRNESS_METRIC_UNSPECIFIED: _ClassVar[FairnessMetric]
    FAIRNESS_METRIC_NONE: _ClassVar[FairnessMetric]
    FAIRNESS_METRIC_EQUAL_OPPORTUNITY: _ClassVar[FairnessMetric]
    FAIRNESS_METRIC_DISPARATE_IMPACT: _ClassVar[FairnessMetric]
    FAIRNESS_METRIC_PREDICTIVE_EQUALITY: _ClassVar[FairnessMetric]
    FAIRNESS_METRIC_DEMOGRAPHIC_PARITY: _ClassVar[FairnessMetric]
    FAIRNESS_METRIC_OVERALL_ACC_EQUALITY: _ClassVar[FairnessMetric]

class PrefixDistribution(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PREFIX_DISTRIBUTION_UNSPECIFIED: _ClassVar[PrefixDistribution]
    PREFIX_DISTRIBUTION_NONE: _ClassVar[PrefixDistribution]
    PREFIX_DISTRIBUTION_RANDOM_TOKENS: _ClassVar[PrefixDistribution]
    PREFIX_DISTRIBUTION_JAILBREAK_MIXTURE: _ClassVar[PrefixDistribution]
    PREFIX_DISTRIBUTION_SOFT_JAILBREAK: _ClassVar[PrefixDistribution]

class BiasDetector(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BIAS_DETECTOR_UNSPECIFIED: _ClassVar[BiasDetector]
    BIAS_DETECTOR_AGREEMENT: _ClassVar[BiasDetector]
    BIAS_DETECTOR_GUARD: _ClassVar[BiasDetector]
DATASET_FORMAT_UNSPECIFIED: DatasetFormat
DATASET_FORMAT_PRAXON: DatasetFormat
DATASET_FORMAT_BINGOGUARD: DatasetFormat
DATASET_FORMAT_WILDGUARDMIX: DatasetFormat
GUARD_KIND_UNSPECIFIED: GuardKind
GUARD_KIND_FROZEN_LINEAR: GuardKind
GUARD_KIND_FINETUNE: GuardKind
GUARD_KIND_GEMMA_FROZEN: GuardKind
GUARD_KIND_GEMMA_LORA: GuardKind
GUARD_POOLING_UNSPECIFIED: GuardPooling
GUARD_POOLING_MEAN: GuardPooling
GUARD_POOLING_LAST: GuardPooling
ROLE_UNSPECIFIED: Role
ROLE_PROMPT: Role
ROLE_RESPONSE: Role
RULE_KIND_UNSPECIFIED: RuleKind
RULE_KIND_BLOCKED: RuleKind
RULE_KIND_ALLOWED: RuleKind
FAIRNESS_METRIC_UNSPECIFIED: FairnessMetric
FAIRNESS_METRIC_NONE: FairnessMetric
FAIRNESS_METRIC_EQUAL_OPPORTUNITY: FairnessMetric
FAIRNESS_METRIC_DISPARATE_IMPACT: FairnessMetric
FAIRNESS_METRIC_PREDICTIVE_EQUALITY: FairnessMetric
FAIRNESS_METRIC_DEMOGRAPHIC_PARITY: FairnessMetric
FAIRNESS_METRIC_OVERALL_ACC_EQUALITY: FairnessMetric
PREFIX_DISTRIBUTION_UNSPECIFIED: PrefixDistribution
PREFIX_DISTRIBUTION_NONE: PrefixDistribution
PREFIX_DISTRIBUTION_RANDOM_TOKENS: PrefixDistribution
PREFIX_DISTRIBUTION_JAILBREAK_MIXTURE: PrefixDistribution
PREFIX_DISTRIBUTION_SOFT_JAILBREAK: PrefixDistribution
BIAS_DETECTOR_UNSPECIFIED: BiasDetector
BIAS_DETECTOR_AGREEMENT: BiasDetector
BIAS_DETECTOR_GUARD: BiasDetector

class TextSpan(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class ModelVersionInfo(_message.Message):
    __slots__ = ("name", "version", "model_version_id", "fingerprint", "kind")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    model_version_id: str
    fingerprint: str
    kind: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ..., model_version_id: _Optional[str] = ..., fingerprint: _Optional[str] = ..., kind: _Optional[str] = ...) -> None: ...

class TopicResult(_message.Message):
    __slots__ = ("topic", "name", "score", "present", "severity", "severity_at_least", "blocked")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    PRESENT_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_AT_LEAST_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    topic: str
    name: str
    score: float
    present: bool
    severity: int
    severity_at_least: _containers.RepeatedScalarFieldContainer[float]
    blocked: bool
    def __init__(self, topic: _Optional[str] = ..., name: _Optional[str] = ..., score: _Optional[float] = ..., present: _Optional[bool] = ..., severity: _Optional[int] = ..., severity_at_least: _Optional[_Iterable[float]] = ..., blocked: _Optional[bool] = ...) -> None: ...

class RuleMatch(_message.Message):
    __slots__ = ("kind", "index", "rule", "score", "sentence", "span")
    KIND_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_FIELD_NUMBER: _ClassVar[int]
    SPAN_FIELD_NUMBER: _ClassVar[int]
    kind: RuleKind
    index: int
    rule: str
    score: float
    sentence: str
    span: TextSpan
    def __init__(self, kind: _Optional[_Union[RuleKind, str]] = ..., index: _Optional[int] = ..., rule: _Optional[str] = ..., score: _Optional[float] = ..., sentence: _Optional[str] = ..., span: _Optional[_Union[TextSpan, _Mapping]] = ...) -> None: ...

class PolicyVerdict(_message.Message):
    __slots__ = ("policy_id", "policy_version", "chunk_id", "chunk_name", "violated", "score", "matched", "overridden_by")
    POLICY_ID_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_NAME_FIELD_NUMBER: _ClassVar[int]
    VIOLATED_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    OVERRIDDEN_BY_FIELD_NUMBER: _ClassVar[int]
    policy_id: str
    policy_version: int
    chunk_id: str
    chunk_name: str
    violated: bool
    score: float
    matched: RuleMatch
    overridden_by: RuleMatch
    def __init__(self, policy_id: _Optional[str] = ..., policy_version: _Optional[int] = ..., chunk_id: _Optional[str] = ..., chunk_name: _Optional[str] = ..., violated: _Optional[bool] = ..., score: _Optional[float] = ..., matched: _Optional[_Union[RuleMatch, _Mapping]] = ..., overridden_by: _Optional[_Union[RuleMatch, _Mapping]] = ...) -> None: ...

class SeverityPredictionSet(_message.Message):
    __slots__ = ("levels", "alpha", "metric", "calibration_model")
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_MODEL_FIELD_NUMBER: _ClassVar[int]
    levels: _containers.RepeatedScalarFieldContainer[int]
    alpha: float
    metric: str
    calibration_model: ModelVersionInfo
    def __init__(self, levels: _Optional[_Iterable[int]] = ..., alpha: _Optional[float] = ..., metric: _Optional[str] = ..., calibration_model: _Optional[_Union[ModelVersionInfo, _Mapping]] = ...) -> None: ...

class ContentResult(_message.Message):
    __slots__ = ("role", "flagged", "unsafe_score", "blocked", "blocking_topics", "top_topic", "topics", "safe_offset", "evidence", "windows", "policy_verdicts", "severity_set")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    FLAGGED_FIELD_NUMBER: _ClassVar[int]
    UNSAFE_SCORE_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    BLOCKING_TOPICS_FIELD_NUMBER: _ClassVar[int]
    TOP_TOPIC_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    SAFE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERDICTS_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_SET_FIELD_NUMBER: _ClassVar[int]
    role: Role
    flagged: bool
    unsafe_score: float
    blocked: bool
    blocking_topics: _containers.RepeatedScalarFieldContainer[str]
    top_topic: str
    topics: _containers.RepeatedCompositeFieldContainer[TopicResult]
    safe_offset: int
    evidence: TextSpan
    windows: int
    policy_verdicts: _containers.RepeatedCompositeFieldContainer[PolicyVerdict]
    severity_set: SeverityPredictionSet
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., flagged: _Optional[bool] = ..., unsafe_score: _Optional[float] = ..., blocked: _Optional[bool] = ..., blocking_topics: _Optional[_Iterable[str]] = ..., top_topic: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[TopicResult, _Mapping]]] = ..., safe_offset: _Optional[int] = ..., evidence: _Optional[_Union[TextSpan, _Mapping]] = ..., windows: _Optional[int] = ..., policy_verdicts: _Optional[_Iterable[_Union[PolicyVerdict, _Mapping]]] = ..., severity_set: _Optional[_Union[SeverityPredictionSet, _Mapping]] = ...) -> None: ...

class Thresholds(_message.Message):
    __slots__ = ("levels", "unsafe_threshold", "topic_threshold", "block_unspecified")
    class LevelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    UNSAFE_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    TOPIC_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    BLOCK_UNSPECIFIED_FIELD_NUMBER: _ClassVar[int]
    levels: _containers.ScalarMap[str, int]
    unsafe_threshold: float
    topic_threshold: float
    block_unspecified: bool
    def __init__(self, levels: _Optional[_Mapping[str, int]] = ..., unsafe_threshold: _Optional[float] = ..., topic_threshold: _Optional[float] = ..., block_unspecified: _Optional[bool] = ...) -> None: ...

class PolicyChunk(_message.Message):
    __slots__ = ("id", "name", "core_value", "blocked", "allowed")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CORE_VALUE_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    core_value: str
    blocked: _containers.RepeatedScalarFieldContainer[str]
    allowed: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., core_value: _Optional[str] = ..., blocked: _Optional[_Iterable[str]] = ..., allowed: _Optional[_Iterable[str]] = ...) -> None: ...

class Policy(_message.Message):
    __slots__ = ("policy_id", "version", "display_name", "chunks", "create_time")
    POLICY_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    policy_id: str
    version: int
    display_name: str
    chunks: _containers.RepeatedCompositeFieldContainer[PolicyChunk]
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, policy_id: _Optional[str] = ..., version: _Optional[int] = ..., display_name: _Optional[str] = ..., chunks: _Optional[_Iterable[_Union[PolicyChunk, _Mapping]]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class PolicySource(_message.Message):
    __slots__ = ("chunks", "text")
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    chunks: _containers.RepeatedCompositeFieldContainer[PolicyChunk]
    text: str
    def __init__(self, chunks: _Optional[_Iterable[_Union[PolicyChunk, _Mapping]]] = ..., text: _Optional[str] = ...) -> None: ...

class StartGuardTrainingJobRequest(_message.Message):
    __slots__ = ("dataset_artifact_id", "format", "model_name", "kind", "l2", "max_iter", "epochs", "trainable_layers", "lr", "head_lr", "batch_size", "seed", "validation_fraction", "idempotency_key", "backbone_model", "layer", "pool", "max_tokens", "lora_rank", "lora_alpha", "lora_layers", "teacher_model")
    DATASET_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    L2_FIELD_NUMBER: _ClassVar[int]
    MAX_ITER_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    TRAINABLE_LAYERS_FIELD_NUMBER: _ClassVar[int]
    LR_FIELD_NUMBER: _ClassVar[int]
    HEAD_LR_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_FRACTION_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    BACKBONE_MODEL_FIELD_NUMBER: _ClassVar[int]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    LORA_ALPHA_FIELD_NUMBER: _ClassVar[int]
    LORA_LAYERS_FIELD_NUMBER: _ClassVar[int]
    TEACHER_MODEL_FIELD_NUMBER: _ClassVar[int]
    dataset_artifact_id: str
    format: DatasetFormat
    model_name: str
    kind: GuardKind
    l2: float
    max_iter: int
    epochs: int
    trainable_layers: int
    lr: float
    head_lr: float
    batch_size: int
    seed: int
    validation_fraction: float
    idempotency_key: str
    backbone_model: _common_pb2.ModelRef
    layer: int
    pool: GuardPooling
    max_tokens: int
    lora_rank: int
    lora_alpha: float
    lora_layers: int
    teacher_model: _common_pb2.ModelRef
    def __init__(self, dataset_artifact_id: _Optional[str] = ..., format: _Optional[_Union[DatasetFormat, str]] = ..., model_name: _Optional[str] = ..., kind: _Optional[_Union[GuardKind, str]] = ..., l2: _Optional[float] = ..., max_iter: _Optional[int] = ..., epochs: _Optional[int] = ..., trainable_layers: _Optional[int] = ..., lr: _Optional[float] = ..., head_lr: _Optional[float] = ..., batch_size: _Optional[int] = ..., seed: _Optional[int] = ..., validation_fraction: _Optional[float] = ..., idempotency_key: _Optional[str] = ..., backbone_model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., layer: _Optional[int] = ..., pool: _Optional[_Union[GuardPooling, str]] = ..., max_tokens: _Optional[int] = ..., lora_rank: _Optional[int] = ..., lora_alpha: _Optional[float] = ..., lora_layers: _Optional[int] = ..., teacher_model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ...) -> None: ...

class StartGuardTrainingJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class StartPolicyScorerTrainingJobRequest(_message.Message):
    __slots__ = ("dataset_artifact_id", "format", "model_name", "l2", "seed", "idempotency_key")
    DATASET_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    L2_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    dataset_artifact_id: str
    format: DatasetFormat
    model_name: str
    l2: float
    seed: int
    idempotency_key: str
    def __init__(self, dataset_artifact_id: _Optional[str] = ..., format: _Optional[_Union[DatasetFormat, str]] = ..., model_name: _Optional[str] = ..., l2: _Optional[float] = ..., seed: _Optional[int] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class StartPolicyScorerTrainingJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class StartCalibrationJobRequest(_message.Message):
    __slots__ = ("guard_model", "dataset_artifact_id", "format", "model_name", "alpha", "metric", "tolerance", "extra_params", "idempotency_key", "group_field")
    GUARD_MODEL_FIELD_NUMBER: _ClassVar[int]
    DATASET_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    TOLERANCE_FIELD_NUMBER: _ClassVar[int]
    EXTRA_PARAMS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_FIELD_NUMBER: _ClassVar[int]
    guard_model: _common_pb2.ModelRef
    dataset_artifact_id: str
    format: DatasetFormat
    model_name: str
    alpha: float
    metric: FairnessMetric
    tolerance: float
    extra_params: _struct_pb2.Struct
    idempotency_key: str
    group_field: str
    def __init__(self, guard_model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., dataset_artifact_id: _Optional[str] = ..., format: _Optional[_Union[DatasetFormat, str]] = ..., model_name: _Optional[str] = ..., alpha: _Optional[float] = ..., metric: _Optional[_Union[FairnessMetric, str]] = ..., tolerance: _Optional[float] = ..., extra_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., group_field: _Optional[str] = ...) -> None: ...

class StartCalibrationJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class StartDistillationJobRequest(_message.Message):
    __slots__ = ("teacher_model", "dataset_artifact_id", "format", "model_name", "augment", "extra_params", "idempotency_key", "generator_model")
    TEACHER_MODEL_FIELD_NUMBER: _ClassVar[int]
    DATASET_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    AUGMENT_FIELD_NUMBER: _ClassVar[int]
    EXTRA_PARAMS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    GENERATOR_MODEL_FIELD_NUMBER: _ClassVar[int]
    teacher_model: _common_pb2.ModelRef
    dataset_artifact_id: str
    format: DatasetFormat
    model_name: str
    augment: bool
    extra_params: _struct_pb2.Struct
    idempotency_key: str
    generator_model: _common_pb2.ModelRef
    def __init__(self, teacher_model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., dataset_artifact_id: _Optional[str] = ..., format: _Optional[_Union[DatasetFormat, str]] = ..., model_name: _Optional[str] = ..., augment: _Optional[bool] = ..., extra_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., generator_model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ...) -> None: ...

class StartDistillationJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class ModerateRequest(_message.Message):
    __slots__ = ("prompt", "prompt_bytes", "response", "response_bytes", "model", "policy_ids", "policy_scorer", "policy_threshold", "calibration_model", "group")
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    POLICY_IDS_FIELD_NUMBER: _ClassVar[int]
    POLICY_SCORER_FIELD_NUMBER: _ClassVar[int]
    POLICY_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_MODEL_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    prompt: str
    prompt_bytes: bytes
    response: str
    response_bytes: bytes
    model: _common_pb2.ModelRef
    policy_ids: _containers.RepeatedScalarFieldContainer[str]
    policy_scorer: _common_pb2.ModelRef
    policy_threshold: float
    calibration_model: _common_pb2.ModelRef
    group: str
    def __init__(self, prompt: _Optional[str] = ..., prompt_bytes: _Optional[bytes] = ..., response: _Optional[str] = ..., response_bytes: _Optional[bytes] = ..., model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., policy_ids: _Optional[_Iterable[str]] = ..., policy_scorer: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., policy_threshold: _Optional[float] = ..., calibration_model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., group: _Optional[str] = ...) -> None: ...

class ModerateResponse(_message.Message):
    __slots__ = ("prompt", "response", "model")
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    prompt: ContentResult
    response: ContentResult
    model: ModelVersionInfo
    def __init__(self, prompt: _Optional[_Union[ContentResult, _Mapping]] = ..., response: _Optional[_Union[ContentResult, _Mapping]] = ..., model: _Optional[_Union[ModelVersionInfo, _Mapping]] = ...) -> None: ...

class BatchItem(_message.Message):
    __slots__ = ("text", "text_bytes", "role", "prompt")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TEXT_BYTES_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    text: str
    text_bytes: bytes
    role: Role
    prompt: str
    def __init__(self, text: _Optional[str] = ..., text_bytes: _Optional[bytes] = ..., role: _Optional[_Union[Role, str]] = ..., prompt: _Optional[str] = ...) -> None: ...

class ModerateBatchRequest(_message.Message):
    __slots__ = ("items", "model", "policy_ids", "policy_scorer", "policy_threshold", "calibration_model", "group")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    POLICY_IDS_FIELD_NUMBER: _ClassVar[int]
    POLICY_SCORER_FIELD_NUMBER: _ClassVar[int]
    POLICY_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    CALIBRATION_MODEL_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[BatchItem]
    model: _common_pb2.ModelRef
    policy_ids: _containers.RepeatedScalarFieldContainer[str]
    policy_scorer: _common_pb2.ModelRef
    policy_threshold: float
    calibration_model: _common_pb2.ModelRef
    group: str
    def __init__(self, items: _Optional[_Iterable[_Union[BatchItem, _Mapping]]] = ..., model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., policy_ids: _Optional[_Iterable[str]] = ..., policy_scorer: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., policy_threshold: _Optional[float] = ..., calibration_model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., group: _Optional[str] = ...) -> None: ...

class ModerateBatchResponse(_message.Message):
    __slots__ = ("results", "model")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ContentResult]
    model: ModelVersionInfo
    def __init__(self, results: _Optional[_Iterable[_Union[ContentResult, _Mapping]]] = ..., model: _Optional[_Union[ModelVersionInfo, _Mapping]] = ...) -> None: ...

class ModerateStreamRequest(_message.Message):
    __slots__ = ("role", "model", "chunk", "chunk_bytes", "prompt")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    CHUNK_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    role: Role
    model: _common_pb2.ModelRef
    chunk: str
    chunk_bytes: bytes
    prompt: str
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., chunk: _Optional[str] = ..., chunk_bytes: _Optional[bytes] = ..., prompt: _Optional[str] = ...) -> None: ...

class ModerateStreamResponse(_message.Message):
    __slots__ = ("safe_offset", "blocked", "blocking_topics", "received", "windows", "final", "result", "model")
    SAFE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    BLOCKING_TOPICS_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    safe_offset: int
    blocked: bool
    blocking_topics: _containers.RepeatedScalarFieldContainer[str]
    received: int
    windows: int
    final: bool
    result: ContentResult
    model: ModelVersionInfo
    def __init__(self, safe_offset: _Optional[int] = ..., blocked: _Optional[bool] = ..., blocking_topics: _Optional[_Iterable[str]] = ..., received: _Optional[int] = ..., windows: _Optional[int] = ..., final: _Optional[bool] = ..., result: _Optional[_Union[ContentResult, _Mapping]] = ..., model: _Optional[_Union[ModelVersionInfo, _Mapping]] = ...) -> None: ...

class SetThresholdsRequest(_message.Message):
    __slots__ = ("levels", "default_level", "unsafe_threshold", "topic_threshold", "block_unspecified")
    class LevelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_LEVEL_FIELD_NUMBER: _ClassVar[int]
    UNSAFE_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    TOPIC_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    BLOCK_UNSPECIFIED_FIELD_NUMBER: _ClassVar[int]
    levels: _containers.ScalarMap[str, int]
    default_level: int
    unsafe_threshold: float
    topic_threshold: float
    block_unspecified: bool
    def __init__(self, levels: _Optional[_Mapping[str, int]] = ..., default_level: _Optional[int] = ..., unsafe_threshold: _Optional[float] = ..., topic_threshold: _Optional[float] = ..., block_unspecified: _Optional[bool] = ...) -> None: ...

class SetThresholdsResponse(_message.Message):
    __slots__ = ("thresholds",)
    THRESHOLDS_FIELD_NUMBER: _ClassVar[int]
    thresholds: Thresholds
    def __init__(self, thresholds: _Optional[_Union[Thresholds, _Mapping]] = ...) -> None: ...

class GetThresholdsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetThresholdsResponse(_message.Message):
    __slots__ = ("thresholds", "is_default", "update_time")
    THRESHOLDS_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    thresholds: Thresholds
    is_default: bool
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, thresholds: _Optional[_Union[Thresholds, _Mapping]] = ..., is_default: _Optional[bool] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreatePolicyRequest(_message.Message):
    __slots__ = ("policy_id", "display_name", "source")
    POLICY_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    policy_id: str
    display_name: str
    source: PolicySource
    def __init__(self, policy_id: _Optional[str] = ..., display_name: _Optional[str] = ..., source: _Optional[_Union[PolicySource, _Mapping]] = ...) -> None: ...

class CreatePolicyResponse(_message.Message):
    __slots__ = ("policy",)
    POLICY_FIELD_NUMBER: _ClassVar[int]
    policy: Policy
    def __init__(self, policy: _Optional[_Union[Policy, _Mapping]] = ...) -> None: ...

class UpdatePolicyRequest(_message.Message):
    __slots__ = ("policy_id", "display_name", "source", "expected_version")
    POLICY_ID_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_VERSION_FIELD_NUMBER: _ClassVar[int]
    policy_id: str
    display_name: str
    source: PolicySource
    expected_version: int
    def __init__(self, policy_id: _Optional[str] = ..., display_name: _Optional[str] = ..., source: _Optional[_Union[PolicySource, _Mapping]] = ..., expected_version: _Optional[int] = ...) -> None: ...

class UpdatePolicyResponse(_message.Message):
    __slots__ = ("policy",)
    POLICY_FIELD_NUMBER: _ClassVar[int]
    policy: Policy
    def __init__(self, policy: _Optional[_Union[Policy, _Mapping]] = ...) -> None: ...

class GetPolicyRequest(_message.Message):
    __slots__ = ("policy_id", "version")
    POLICY_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    policy_id: str
    version: int
    def __init__(self, policy_id: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class GetPolicyResponse(_message.Message):
    __slots__ = ("policy",)
    POLICY_FIELD_NUMBER: _ClassVar[int]
    policy: Policy
    def __init__(self, policy: _Optional[_Union[Policy, _Mapping]] = ...) -> None: ...

class ListPoliciesRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListPoliciesResponse(_message.Message):
    __slots__ = ("policies", "next_page_token")
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    policies: _containers.RepeatedCompositeFieldContainer[Policy]
    next_page_token: str
    def __init__(self, policies: _Optional[_Iterable[_Union[Policy, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DeletePolicyRequest(_message.Message):
    __slots__ = ("policy_id",)
    POLICY_ID_FIELD_NUMBER: _ClassVar[int]
    policy_id: str
    def __init__(self, policy_id: _Optional[str] = ...) -> None: ...

class DeletePolicyResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StartBiasCertificationJobRequest(_message.Message):
    __slots__ = ("generator_model", "prompts", "groups", "prefix_distribution", "detector", "detector_model", "confidence", "samples", "seed", "extra_params", "idempotency_key")
    GENERATOR_MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPTS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_DISTRIBUTION_FIELD_NUMBER: _ClassVar[int]
    DETECTOR_FIELD_NUMBER: _ClassVar[int]
    DETECTOR_MODEL_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    EXTRA_PARAMS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    generator_model: _common_pb2.ModelRef
    prompts: _containers.RepeatedScalarFieldContainer[str]
    groups: _containers.RepeatedScalarFieldContainer[str]
    prefix_distribution: PrefixDistribution
    detector: BiasDetector
    detector_model: _common_pb2.ModelRef
    confidence: float
    samples: int
    seed: int
    extra_params: _struct_pb2.Struct
    idempotency_key: str
    def __init__(self, generator_model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., prompts: _Optional[_Iterable[str]] = ..., groups: _Optional[_Iterable[str]] = ..., prefix_distribution: _Optional[_Union[PrefixDistribution, str]] = ..., detector: _Optional[_Union[BiasDetector, str]] = ..., detector_model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., confidence: _Optional[float] = ..., samples: _Optional[int] = ..., seed: _Optional[int] = ..., extra_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class StartBiasCertificationJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class PromptBound(_message.Message):
    __slots__ = ("prompt", "samples", "unbiased", "lower", "upper")
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    UNBIASED_FIELD_NUMBER: _ClassVar[int]
    LOWER_FIELD_NUMBER: _ClassVar[int]
    UPPER_FIELD_NUMBER: _ClassVar[int]
    prompt: str
    samples: int
    unbiased: int
    lower: float
    upper: float
    def __init__(self, prompt: _Optional[str] = ..., samples: _Optional[int] = ..., unbiased: _Optional[int] = ..., lower: _Optional[float] = ..., upper: _Optional[float] = ...) -> None: ...

class BiasCertificate(_message.Message):
    __slots__ = ("id", "job_id", "generator_model", "generator_model_version_id", "prefix_distribution", "detector", "detector_model_version_id", "groups", "confidence", "samples", "unbiased", "lower", "upper", "prompts", "spec_sha256", "params", "create_time")
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATOR_MODEL_FIELD_NUMBER: _ClassVar[int]
    GENERATOR_MODEL_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    PREFIX_DISTRIBUTION_FIELD_NUMBER: _ClassVar[int]
    DETECTOR_FIELD_NUMBER: _ClassVar[int]
    DETECTOR_MODEL_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    UNBIASED_FIELD_NUMBER: _ClassVar[int]
    LOWER_FIELD_NUMBER: _ClassVar[int]
    UPPER_FIELD_NUMBER: _ClassVar[int]
    PROMPTS_FIELD_NUMBER: _ClassVar[int]
    SPEC_SHA256_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    job_id: str
    generator_model: _common_pb2.ModelRef
    generator_model_version_id: str
    prefix_distribution: PrefixDistribution
    detector: BiasDetector
    detector_model_version_id: str
    groups: _containers.RepeatedScalarFieldContainer[str]
    confidence: float
    samples: int
    unbiased: int
    lower: float
    upper: float
    prompts: _containers.RepeatedCompositeFieldContainer[PromptBound]
    spec_sha256: str
    params: _struct_pb2.Struct
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., job_id: _Optional[str] = ..., generator_model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., generator_model_version_id: _Optional[str] = ..., prefix_distribution: _Optional[_Union[PrefixDistribution, str]] = ..., detector: _Optional[_Union[BiasDetector, str]] = ..., detector_model_version_id: _Optional[str] = ..., groups: _Optional[_Iterable[str]] = ..., confidence: _Optional[float] = ..., samples: _Optional[int] = ..., unbiased: _Optional[int] = ..., lower: _Optional[float] = ..., upper: _Optional[float] = ..., prompts: _Optional[_Iterable[_Union[PromptBound, _Mapping]]] = ..., spec_sha256: _Optional[str] = ..., params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetBiasCertificateRequest(_message.Message):
    __slots__ = ("certificate_id",)
    CERTIFICATE_ID_FIELD_NUMBER: _ClassVar[int]
    certificate_id: str
    def __init__(self, certificate_id: _Optional[str] = ...) -> None: ...

class GetBiasCertificateResponse(_message.Message):
    __slots__ = ("certificate",)
    CERTIFICATE_FIELD_NUMBER: _ClassVar[int]
    certificate: BiasCertificate
    def __init__(self, certificate: _Optional[_Union[BiasCertificate, _Mapping]] = ...) -> None: ...

class ListBiasCertificatesRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "generator_model_version_id")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    GENERATOR_MODEL_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    generator_model_version_id: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., generator_model_version_id: _Optional[str] = ...) -> None: ...

class ListBiasCertificatesResponse(_message.Message):
    __slots__ = ("certificates", "next_page_token")
    CERTIFICATES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    certificates: _containers.RepeatedCompositeFieldContainer[BiasCertificate]
    next_page_token: str
    def __init__(self, certificates: _Optional[_Iterable[_Union[BiasCertificate, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
