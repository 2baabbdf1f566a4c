import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from praxon.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Method(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    METHOD_UNSPECIFIED: _ClassVar[Method]
    METHOD_CERTIFIED_NOISY_MINIMIZER: _ClassVar[Method]
    METHOD_ROBUST_CERTIFIED: _ClassVar[Method]
    METHOD_NOISY_FINETUNE: _ClassVar[Method]
    METHOD_RETRAIN: _ClassVar[Method]
    METHOD_FINETUNE: _ClassVar[Method]
    METHOD_GRADIENT_ASCENT: _ClassVar[Method]
    METHOD_FLAT: _ClassVar[Method]
    METHOD_NPO: _ClassVar[Method]

class ModelKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_KIND_UNSPECIFIED: _ClassVar[ModelKind]
    MODEL_KIND_LOGREG_L2: _ClassVar[ModelKind]
    MODEL_KIND_SOFTMAX_L2: _ClassVar[ModelKind]
    MODEL_KIND_RIDGE_L2: _ClassVar[ModelKind]
    MODEL_KIND_DPSGD_SOFTMAX: _ClassVar[ModelKind]
    MODEL_KIND_CAUSAL_LM_QA: _ClassVar[ModelKind]

class Adaptation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ADAPTATION_UNSPECIFIED: _ClassVar[Adaptation]
    ADAPTATION_LORA: _ClassVar[Adaptation]
    ADAPTATION_FULL: _ClassVar[Adaptation]

class FlatDivergence(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FLAT_DIVERGENCE_UNSPECIFIED: _ClassVar[FlatDivergence]
    FLAT_DIVERGENCE_TOTAL_VARIATION: _ClassVar[FlatDivergence]
    FLAT_DIVERGENCE_KL: _ClassVar[FlatDivergence]
    FLAT_DIVERGENCE_REVERSE_KL: _ClassVar[FlatDivergence]
    FLAT_DIVERGENCE_JEFFREY: _ClassVar[FlatDivergence]
    FLAT_DIVERGENCE_SQUARED_HELLINGER: _ClassVar[FlatDivergence]
    FLAT_DIVERGENCE_PEARSON: _ClassVar[FlatDivergence]
    FLAT_DIVERGENCE_NEYMAN: _ClassVar[FlatDivergence]
    FLAT_DIVERGENCE_JENSEN_SHANNON: _ClassVar[FlatDivergence]

class AuditMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AUDIT_METHOD_UNSPECIFIED: _ClassVar[AuditMethod]
    AUDIT_METHOD_OUTPUT_PERTURBATION: _ClassVar[AuditMethod]
    AUDIT_METHOD_HIDDEN_STATE_CANARY: _ClassVar[AuditMethod]
METHOD_UNSPECIFIED: Method
METHOD_CERTIFIED_NOISY_MINIMIZER: Method
METHOD_ROBUST_CERTIFIED: Method
METHOD_NOISY_FINETUNE: Method
METHOD_RETRAIN: Method
METHOD_FINETUNE: Method
METHOD_GRADIENT_ASCENT: Method
METHOD_FLAT: Method
METHOD_NPO: Method
MODEL_KIND_UNSPECIFIED: ModelKind
MODEL_KIND_LOGREG_L2: ModelKind
MODEL_KIND_SOFTMAX_L2: ModelKind
MODEL_KIND_RIDGE_L2: ModelKind
MODEL_KIND_DPSGD_SOFTMAX: ModelKind
MODEL_KIND_CAUSAL_LM_QA: ModelKind
ADAPTATION_UNSPECIFIED: Adaptation
ADAPTATION_LORA: Adaptation
ADAPTATION_FULL: Adaptation
FLAT_DIVERGENCE_UNSPECIFIED: FlatDivergence
FLAT_DIVERGENCE_TOTAL_VARIATION: FlatDivergence
FLAT_DIVERGENCE_KL: FlatDivergence
FLAT_DIVERGENCE_REVERSE_KL: FlatDivergence
FLAT_DIVERGENCE_JEFFREY: FlatDivergence
FLAT_DIVERGENCE_SQUARED_HELLINGER: FlatDivergence
FLAT_DIVERGENCE_PEARSON: FlatDivergence
FLAT_DIVERGENCE_NEYMAN: FlatDivergence
FLAT_DIVERGENCE_JENSEN_SHANNON: FlatDivergence
AUDIT_METHOD_UNSPECIFIED: AuditMethod
AUDIT_METHOD_OUTPUT_PERTURBATION: AuditMethod
AUDIT_METHOD_HIDDEN_STATE_CANARY: AuditMethod

class LanguageModelTuning(_message.Message):
    __slots__ = ("adaptation", "lora_rank", "lora_alpha", "epochs", "learning_rate", "batch_size", "divergence", "template_answers", "npo_beta", "npo_retain_weight", "max_length", "grad_accum", "weight_decay", "lora_dropout", "checkpoint_every")
    ADAPTATION_FIELD_NUMBER: _ClassVar[int]
    LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    LORA_ALPHA_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    DIVERGENCE_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_ANSWERS_FIELD_NUMBER: _ClassVar[int]
    NPO_BETA_FIELD_NUMBER: _ClassVar[int]
    NPO_RETAIN_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_LENGTH_FIELD_NUMBER: _ClassVar[int]
    GRAD_ACCUM_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    LORA_DROPOUT_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_EVERY_FIELD_NUMBER: _ClassVar[int]
    adaptation: Adaptation
    lora_rank: int
    lora_alpha: float
    epochs: int
    learning_rate: float
    batch_size: int
    divergence: FlatDivergence
    template_answers: _containers.RepeatedScalarFieldContainer[str]
    npo_beta: float
    npo_retain_weight: float
    max_length: int
    grad_accum: int
    weight_decay: float
    lora_dropout: float
    checkpoint_every: int
    def __init__(self, adaptation: _Optional[_Union[Adaptation, str]] = ..., lora_rank: _Optional[int] = ..., lora_alpha: _Optional[float] = ..., epochs: _Optional[int] = ..., learning_rate: _Optional[float] = ..., batch_size: _Optional[int] = ..., divergence: _Optional[_Union[FlatDivergence, str]] = ..., template_answers: _Optional[_Iterable[str]] = ..., npo_beta: _Optional[float] = ..., npo_retain_weight: _Optional[float] = ..., max_length: _Optional[int] = ..., grad_accum: _Optional[int] = ..., weight_decay: _Optional[float] = ..., lora_dropout: _Optional[float] = ..., checkpoint_every: _Optional[int] = ...) -> None: ...

class DpSgdConfig(_message.Message):
    __slots__ = ("noise_multiplier", "max_grad_norm", "steps", "sample_rate", "learning_rate")
    NOISE_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    MAX_GRAD_NORM_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    noise_multiplier: float
    max_grad_norm: float
    steps: int
    sample_rate: float
    learning_rate: float
    def __init__(self, noise_multiplier: _Optional[float] = ..., max_grad_norm: _Optional[float] = ..., steps: _Optional[int] = ..., sample_rate: _Optional[float] = ..., learning_rate: _Optional[float] = ...) -> None: ...

class Guarantee(_message.Message):
    __slots__ = ("kind", "epsilon", "delta", "mechanism", "statement")
    KIND_FIELD_NUMBER: _ClassVar[int]
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    STATEMENT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    epsilon: float
    delta: float
    mechanism: str
    statement: str
    def __init__(self, kind: _Optional[str] = ..., epsilon: _Optional[float] = ..., delta: _Optional[float] = ..., mechanism: _Optional[str] = ..., statement: _Optional[str] = ...) -> None: ...

class StartTrainingJobRequest(_message.Message):
    __slots__ = ("dataset_artifact_id", "kind", "name", "mu", "r", "epsilon", "delta", "seed", "num_classes", "capacity", "eval_dataset_artifact_id", "idempotency_key", "dpsgd", "base_model", "language_model")
    DATASET_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MU_FIELD_NUMBER: _ClassVar[int]
    R_FIELD_NUMBER: _ClassVar[int]
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    EVAL_DATASET_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    DPSGD_FIELD_NUMBER: _ClassVar[int]
    BASE_MODEL_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    dataset_artifact_id: str
    kind: ModelKind
    name: str
    mu: float
    r: float
    epsilon: float
    delta: float
    seed: int
    num_classes: int
    capacity: int
    eval_dataset_artifact_id: str
    idempotency_key: str
    dpsgd: DpSgdConfig
    base_model: _common_pb2.ModelRef
    language_model: LanguageModelTuning
    def __init__(self, dataset_artifact_id: _Optional[str] = ..., kind: _Optional[_Union[ModelKind, str]] = ..., name: _Optional[str] = ..., mu: _Optional[float] = ..., r: _Optional[float] = ..., epsilon: _Optional[float] = ..., delta: _Optional[float] = ..., seed: _Optional[int] = ..., num_classes: _Optional[int] = ..., capacity: _Optional[int] = ..., eval_dataset_artifact_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., dpsgd: _Optional[_Union[DpSgdConfig, _Mapping]] = ..., base_model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., language_model: _Optional[_Union[LanguageModelTuning, _Mapping]] = ...) -> None: ...

class StartTrainingJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class StartUnlearningJobRequest(_message.Message):
    __slots__ = ("model", "model_version_id", "forget_record_ids", "forget_set_artifact_id", "method", "epsilon", "delta", "seed", "name", "eval_dataset_artifact_id", "reason", "steps", "learning_rate", "idempotency_key", "language_model")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    FORGET_RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    FORGET_SET_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    EVAL_DATASET_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    model_version_id: str
    forget_record_ids: _containers.RepeatedScalarFieldContainer[str]
    forget_set_artifact_id: str
    method: Method
    epsilon: float
    delta: float
    seed: int
    name: str
    eval_dataset_artifact_id: str
    reason: str
    steps: int
    learning_rate: float
    idempotency_key: str
    language_model: LanguageModelTuning
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., model_version_id: _Optional[str] = ..., forget_record_ids: _Optional[_Iterable[str]] = ..., forget_set_artifact_id: _Optional[str] = ..., method: _Optional[_Union[Method, str]] = ..., epsilon: _Optional[float] = ..., delta: _Optional[float] = ..., seed: _Optional[int] = ..., name: _Optional[str] = ..., eval_dataset_artifact_id: _Optional[str] = ..., reason: _Optional[str] = ..., steps: _Optional[int] = ..., learning_rate: _Optional[float] = ..., idempotency_key: _Optional[str] = ..., language_model: _Optional[_Union[LanguageModelTuning, _Mapping]] = ...) -> None: ...

class StartUnlearningJobResponse(_message.Message):
    __slots__ = ("job", "record_id")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    record_id: str
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ..., record_id: _Optional[str] = ...) -> None: ...

class StartAuditJobRequest(_message.Message):
    __slots__ = ("record_id", "model", "runs", "alpha", "seed", "idempotency_key", "method", "canary_every")
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    CANARY_EVERY_FIELD_NUMBER: _ClassVar[int]
    record_id: str
    model: _common_pb2.ModelRef
    runs: int
    alpha: float
    seed: int
    idempotency_key: str
    method: AuditMethod
    canary_every: int
    def __init__(self, record_id: _Optional[str] = ..., model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., runs: _Optional[int] = ..., alpha: _Optional[float] = ..., seed: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., method: _Optional[_Union[AuditMethod, str]] = ..., canary_every: _Optional[int] = ...) -> None: ...

class StartAuditJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class Requester(_message.Message):
    __slots__ = ("tenant_id", "token_id", "token_name", "request_id")
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_NAME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    tenant_id: str
    token_id: str
    token_name: str
    request_id: str
    def __init__(self, tenant_id: _Optional[str] = ..., token_id: _Optional[str] = ..., token_name: _Optional[str] = ..., request_id: _Optional[str] = ...) -> None: ...

class Certificate(_message.Message):
    __slots__ = ("certified", "epsilon", "delta", "radius", "sigma", "steps", "gradient_evaluations", "final_gradient_norm", "mu", "start", "definition")
    CERTIFIED_FIELD_NUMBER: _ClassVar[int]
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    RADIUS_FIELD_NUMBER: _ClassVar[int]
    SIGMA_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    GRADIENT_EVALUATIONS_FIELD_NUMBER: _ClassVar[int]
    FINAL_GRADIENT_NORM_FIELD_NUMBER: _ClassVar[int]
    MU_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_FIELD_NUMBER: _ClassVar[int]
    certified: bool
    epsilon: float
    delta: float
    radius: float
    sigma: float
    steps: int
    gradient_evaluations: int
    final_gradient_norm: float
    mu: float
    start: str
    definition: str
    def __init__(self, certified: _Optional[bool] = ..., epsilon: _Optional[float] = ..., delta: _Optional[float] = ..., radius: _Optional[float] = ..., sigma: _Optional[float] = ..., steps: _Optional[int] = ..., gradient_evaluations: _Optional[int] = ..., final_gradient_norm: _Optional[float] = ..., mu: _Optional[float] = ..., start: _Optional[str] = ..., definition: _Optional[str] = ...) -> None: ...

class Audit(_message.Message):
    __slots__ = ("job_id", "state", "epsilon_lower_bound", "claimed_epsilon", "violated", "pre_noise_distance", "sensitivity_bound", "report_artifact_id", "error", "finish_time", "method", "accountant_epsilon", "canary_every", "runs", "confidence")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EPSILON_LOWER_BOUND_FIELD_NUMBER: _ClassVar[int]
    CLAIMED_EPSILON_FIELD_NUMBER: _ClassVar[int]
    VIOLATED_FIELD_NUMBER: _ClassVar[int]
    PRE_NOISE_DISTANCE_FIELD_NUMBER: _ClassVar[int]
    SENSITIVITY_BOUND_FIELD_NUMBER: _ClassVar[int]
    REPORT_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    ACCOUNTANT_EPSILON_FIELD_NUMBER: _ClassVar[int]
    CANARY_EVERY_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    state: _common_pb2.JobState
    epsilon_lower_bound: float
    claimed_epsilon: float
    violated: bool
    pre_noise_distance: float
    sensitivity_bound: float
    report_artifact_id: str
    error: _common_pb2.JobError
    finish_time: _timestamp_pb2.Timestamp
    method: AuditMethod
    accountant_epsilon: float
    canary_every: int
    runs: int
    confidence: float
    def __init__(self, job_id: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.JobState, str]] = ..., epsilon_lower_bound: _Optional[float] = ..., claimed_epsilon: _Optional[float] = ..., violated: _Optional[bool] = ..., pre_noise_distance: _Optional[float] = ..., sensitivity_bound: _Optional[float] = ..., report_artifact_id: _Optional[str] = ..., error: _Optional[_Union[_common_pb2.JobError, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., method: _Optional[_Union[AuditMethod, str]] = ..., accountant_epsilon: _Optional[float] = ..., canary_every: _Optional[int] = ..., runs: _Optional[int] = ..., confidence: _Optional[float] = ...) -> None: ...

class UnlearningRecord(_message.Message):
    __slots__ = ("id", "requester", "job_id", "source_model", "source_model_version_id", "dataset_artifact_id", "forget_record_ids", "forget_set_artifact_id", "method", "epsilon", "delta", "reason", "create_time", "state", "certificate", "new_model", "new_model_version_id", "report_artifact_id", "regime", "costs", "metrics", "error", "finish_time", "audits", "guarantee")
    class CostsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    REQUESTER_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_MODEL_FIELD_NUMBER: _ClassVar[int]
    SOURCE_MODEL_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    DATASET_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    FORGET_RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    FORGET_SET_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_FIELD_NUMBER: _ClassVar[int]
    NEW_MODEL_FIELD_NUMBER: _ClassVar[int]
    NEW_MODEL_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    REPORT_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    REGIME_FIELD_NUMBER: _ClassVar[int]
    COSTS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    AUDITS_FIELD_NUMBER: _ClassVar[int]
    GUARANTEE_FIELD_NUMBER: _ClassVar[int]
    id: str
    requester: Requester
    job_id: str
    source_model: _common_pb2.ModelRef
    source_model_version_id: str
    dataset_artifact_id: str
    forget_record_ids: _containers.RepeatedScalarFieldContainer[str]
    forget_set_artifact_id: str
    method: Method
    epsilon: float
    delta: float
    reason: str
    create_time: _timestamp_pb2.Timestamp
    state: _common_pb2.JobState
    certificate: Certificate
    new_model: _common_pb2.ModelRef
    new_model_version_id: str
    report_artifact_id: str
    regime: str
    costs: _containers.ScalarMap[str, float]
    metrics: _containers.ScalarMap[str, float]
    error: _common_pb2.JobError
    finish_time: _timestamp_pb2.Timestamp
    audits: _containers.RepeatedCompositeFieldContainer[Audit]
    guarantee: Guarantee
    def __init__(self, id: _Optional[str] = ..., requester: _Optional[_Union[Requester, _Mapping]] = ..., job_id: _Optional[str] = ..., source_model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., source_model_version_id: _Optional[str] = ..., dataset_artifact_id: _Optional[str] = ..., forget_record_ids: _Optional[_Iterable[str]] = ..., forget_set_artifact_id: _Optional[str] = ..., method: _Optional[_Union[Method, str]] = ..., epsilon: _Optional[float] = ..., delta: _Optional[float] = ..., reason: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., state: _Optional[_Union[_common_pb2.JobState, str]] = ..., certificate: _Optional[_Union[Certificate, _Mapping]] = ..., new_model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., new_model_version_id: _Optional[str] = ..., report_artifact_id: _Optional[str] = ..., regime: _Optional[str] = ..., costs: _Optional[_Mapping[str, float]] = ..., metrics: _Optional[_Mapping[str, float]] = ..., error: _Optional[_Union[_common_pb2.JobError, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., audits: _Optional[_Iterable[_Union[Audit, _Mapping]]] = ..., guarantee: _Optional[_Union[Guarantee, _Mapping]] = ...) -> None: ...

class GetUnlearningRecordRequest(_message.Message):
    __slots__ = ("record_id",)
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    record_id: str
    def __init__(self, record_id: _Optional[str] = ...) -> None: ...

class GetUnlearningRecordResponse(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: UnlearningRecord
    def __init__(self, record: _Optional[_Union[UnlearningRecord, _Mapping]] = ...) -> None: ...

class ListUnlearningRecordsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "model_name")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    model_name: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., model_name: _Optional[str] = ...) -> None: ...

class ListUnlearningRecordsResponse(_message.Message):
    __slots__ = ("records", "next_page_token")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[UnlearningRecord]
    next_page_token: str
    def __init__(self, records: _Optional[_Iterable[_Union[UnlearningRecord, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetUnlearningReportRequest(_message.Message):
    __slots__ = ("record_id",)
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    record_id: str
    def __init__(self, record_id: _Optional[str] = ...) -> None: ...

class GetUnlearningReportResponse(_message.Message):
    __slots__ = ("report_json", "sha256", "job_report")
    REPORT_JSON_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    JOB_REPORT_FIELD_NUMBER: _ClassVar[int]
    report_json: str
    sha256: str
    job_report: _common_pb2.ArtifactRef
    def __init__(self, report_json: _Optional[str] = ..., sha256: _Optional[str] = ..., job_report: _Optional[_Union[_common_pb2.ArtifactRef, _Mapping]] = ...) -> None: ...
