from google.protobuf import struct_pb2 as _struct_pb2
from praxon.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DataFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DATA_FORMAT_UNSPECIFIED: _ClassVar[DataFormat]
    DATA_FORMAT_CSV: _ClassVar[DataFormat]
    DATA_FORMAT_TSV: _ClassVar[DataFormat]
    DATA_FORMAT_PARQUET: _ClassVar[DataFormat]

class BuiltinDataset(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BUILTIN_DATASET_UNSPECIFIED: _ClassVar[BuiltinDataset]
    BUILTIN_DATASET_ML_100K: _ClassVar[BuiltinDataset]
    BUILTIN_DATASET_SYNTHETIC: _ClassVar[BuiltinDataset]

class SplitProtocol(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SPLIT_PROTOCOL_UNSPECIFIED: _ClassVar[SplitProtocol]
    SPLIT_PROTOCOL_USER_SPLIT: _ClassVar[SplitProtocol]
    SPLIT_PROTOCOL_LEAVE_ONE_OUT: _ClassVar[SplitProtocol]

class ModelKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_KIND_UNSPECIFIED: _ClassVar[ModelKind]
    MODEL_KIND_PREFERDIFF: _ClassVar[ModelKind]
    MODEL_KIND_DREAMREC: _ClassVar[ModelKind]
    MODEL_KIND_SASREC_CE: _ClassVar[ModelKind]
    MODEL_KIND_POPULARITY: _ClassVar[ModelKind]
    MODEL_KIND_GRU4REC: _ClassVar[ModelKind]

class ScoredBy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCORED_BY_UNSPECIFIED: _ClassVar[ScoredBy]
    SCORED_BY_MODEL: _ClassVar[ScoredBy]
    SCORED_BY_POPULARITY_EMPTY_HISTORY: _ClassVar[ScoredBy]
    SCORED_BY_POPULARITY_NO_KNOWN_ITEMS: _ClassVar[ScoredBy]
    SCORED_BY_POPULARITY_MODEL: _ClassVar[ScoredBy]
DATA_FORMAT_UNSPECIFIED: DataFormat
DATA_FORMAT_CSV: DataFormat
DATA_FORMAT_TSV: DataFormat
DATA_FORMAT_PARQUET: DataFormat
BUILTIN_DATASET_UNSPECIFIED: BuiltinDataset
BUILTIN_DATASET_ML_100K: BuiltinDataset
BUILTIN_DATASET_SYNTHETIC: BuiltinDataset
SPLIT_PROTOCOL_UNSPECIFIED: SplitProtocol
SPLIT_PROTOCOL_USER_SPLIT: SplitProtocol
SPLIT_PROTOCOL_LEAVE_ONE_OUT: SplitProtocol
MODEL_KIND_UNSPECIFIED: ModelKind
MODEL_KIND_PREFERDIFF: ModelKind
MODEL_KIND_DREAMREC: ModelKind
MODEL_KIND_SASREC_CE: ModelKind
MODEL_KIND_POPULARITY: ModelKind
MODEL_KIND_GRU4REC: ModelKind
SCORED_BY_UNSPECIFIED: ScoredBy
SCORED_BY_MODEL: ScoredBy
SCORED_BY_POPULARITY_EMPTY_HISTORY: ScoredBy
SCORED_BY_POPULARITY_NO_KNOWN_ITEMS: ScoredBy
SCORED_BY_POPULARITY_MODEL: ScoredBy

class SyntheticOptions(_message.Message):
    __slots__ = ("n_users", "n_items", "n_clusters", "successors", "min_len", "max_len", "noise", "synthetic_seed")
    N_USERS_FIELD_NUMBER: _ClassVar[int]
    N_ITEMS_FIELD_NUMBER: _ClassVar[int]
    N_CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    SUCCESSORS_FIELD_NUMBER: _ClassVar[int]
    MIN_LEN_FIELD_NUMBER: _ClassVar[int]
    MAX_LEN_FIELD_NUMBER: _ClassVar[int]
    NOISE_FIELD_NUMBER: _ClassVar[int]
    SYNTHETIC_SEED_FIELD_NUMBER: _ClassVar[int]
    n_users: int
    n_items: int
    n_clusters: int
    successors: int
    min_len: int
    max_len: int
    noise: float
    synthetic_seed: int
    def __init__(self, n_users: _Optional[int] = ..., n_items: _Optional[int] = ..., n_clusters: _Optional[int] = ..., successors: _Optional[int] = ..., min_len: _Optional[int] = ..., max_len: _Optional[int] = ..., noise: _Optional[float] = ..., synthetic_seed: _Optional[int] = ...) -> None: ...

class StartImportInteractionsJobRequest(_message.Message):
    __slots__ = ("artifact_id", "builtin", "format", "name", "seed", "max_history", "synthetic", "idempotency_key", "protocol")
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    BUILTIN_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MAX_HISTORY_FIELD_NUMBER: _ClassVar[int]
    SYNTHETIC_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    artifact_id: str
    builtin: BuiltinDataset
    format: DataFormat
    name: str
    seed: int
    max_history: int
    synthetic: SyntheticOptions
    idempotency_key: str
    protocol: SplitProtocol
    def __init__(self, artifact_id: _Optional[str] = ..., builtin: _Optional[_Union[BuiltinDataset, str]] = ..., format: _Optional[_Union[DataFormat, str]] = ..., name: _Optional[str] = ..., seed: _Optional[int] = ..., max_history: _Optional[int] = ..., synthetic: _Optional[_Union[SyntheticOptions, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., protocol: _Optional[_Union[SplitProtocol, str]] = ...) -> None: ...

class StartImportInteractionsJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class TrainingParams(_message.Message):
    __slots__ = ("epochs", "batch_size", "lr", "weight_decay", "dim", "heads", "layers", "dropout", "lam", "gamma", "guidance_w", "p_null", "timesteps", "sample_steps", "patience", "seed", "max_history", "train_samples", "loss_type", "early_stop_metric", "optimizer", "device", "inner")
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    LR_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    HEADS_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    DROPOUT_FIELD_NUMBER: _ClassVar[int]
    LAM_FIELD_NUMBER: _ClassVar[int]
    GAMMA_FIELD_NUMBER: _ClassVar[int]
    GUIDANCE_W_FIELD_NUMBER: _ClassVar[int]
    P_NULL_FIELD_NUMBER: _ClassVar[int]
    TIMESTEPS_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_STEPS_FIELD_NUMBER: _ClassVar[int]
    PATIENCE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MAX_HISTORY_FIELD_NUMBER: _ClassVar[int]
    TRAIN_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    LOSS_TYPE_FIELD_NUMBER: _ClassVar[int]
    EARLY_STOP_METRIC_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    INNER_FIELD_NUMBER: _ClassVar[int]
    epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    dim: int
    heads: int
    layers: int
    dropout: float
    lam: float
    gamma: float
    guidance_w: float
    p_null: float
    timesteps: int
    sample_steps: int
    patience: int
    seed: int
    max_history: int
    train_samples: str
    loss_type: str
    early_stop_metric: str
    optimizer: str
    device: str
    inner: int
    def __init__(self, epochs: _Optional[int] = ..., batch_size: _Optional[int] = ..., lr: _Optional[float] = ..., weight_decay: _Optional[float] = ..., dim: _Optional[int] = ..., heads: _Optional[int] = ..., layers: _Optional[int] = ..., dropout: _Optional[float] = ..., lam: _Optional[float] = ..., gamma: _Optional[float] = ..., guidance_w: _Optional[float] = ..., p_null: _Optional[float] = ..., timesteps: _Optional[int] = ..., sample_steps: _Optional[int] = ..., patience: _Optional[int] = ..., seed: _Optional[int] = ..., max_history: _Optional[int] = ..., train_samples: _Optional[str] = ..., loss_type: _Optional[str] = ..., early_stop_metric: _Optional[str] = ..., optimizer: _Optional[str] = ..., device: _Optional[str] = ..., inner: _Optional[int] = ...) -> None: ...

class StartTrainingJobRequest(_message.Message):
    __slots__ = ("dataset_artifact_id", "model_kind", "model_name", "params", "extra_params", "idempotency_key")
    DATASET_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_KIND_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_PARAMS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    dataset_artifact_id: str
    model_kind: ModelKind
    model_name: str
    params: TrainingParams
    extra_params: _struct_pb2.Struct
    idempotency_key: str
    def __init__(self, dataset_artifact_id: _Optional[str] = ..., model_kind: _Optional[_Union[ModelKind, str]] = ..., model_name: _Optional[str] = ..., params: _Optional[_Union[TrainingParams, _Mapping]] = ..., extra_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class StartTrainingJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class SweepAxis(_message.Message):
    __slots__ = ("name", "values", "text_values")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    TEXT_VALUES_FIELD_NUMBER: _ClassVar[int]
    name: str
    values: _containers.RepeatedScalarFieldContainer[float]
    text_values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., values: _Optional[_Iterable[float]] = ..., text_values: _Optional[_Iterable[str]] = ...) -> None: ...

class StartSweepJobRequest(_message.Message):
    __slots__ = ("dataset_artifact_id", "model_kind", "params", "extra_params", "grid", "metric", "idempotency_key")
    DATASET_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_KIND_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_PARAMS_FIELD_NUMBER: _ClassVar[int]
    GRID_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    dataset_artifact_id: str
    model_kind: ModelKind
    params: TrainingParams
    extra_params: _struct_pb2.Struct
    grid: _containers.RepeatedCompositeFieldContainer[SweepAxis]
    metric: str
    idempotency_key: str
    def __init__(self, dataset_artifact_id: _Optional[str] = ..., model_kind: _Optional[_Union[ModelKind, str]] = ..., params: _Optional[_Union[TrainingParams, _Mapping]] = ..., extra_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., grid: _Optional[_Iterable[_Union[SweepAxis, _Mapping]]] = ..., metric: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class StartSweepJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class ModelVersionInfo(_message.Message):
    __slots__ = ("name", "version", "model_version_id", "model_kind", "catalogue_size")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_KIND_FIELD_NUMBER: _ClassVar[int]
    CATALOGUE_SIZE_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    model_version_id: str
    model_kind: str
    catalogue_size: int
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ..., model_version_id: _Optional[str] = ..., model_kind: _Optional[str] = ..., catalogue_size: _Optional[int] = ...) -> None: ...

class History(_message.Message):
    __slots__ = ("item_ids", "item_indices")
    ITEM_IDS_FIELD_NUMBER: _ClassVar[int]
    ITEM_INDICES_FIELD_NUMBER: _ClassVar[int]
    item_ids: _containers.RepeatedScalarFieldContainer[str]
    item_indices: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, item_ids: _Optional[_Iterable[str]] = ..., item_indices: _Optional[_Iterable[int]] = ...) -> None: ...

class ScoredItem(_message.Message):
    __slots__ = ("item_id", "item_index", "score")
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    ITEM_INDEX_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    item_index: int
    score: float
    def __init__(self, item_id: _Optional[str] = ..., item_index: _Optional[int] = ..., score: _Optional[float] = ...) -> None: ...

class Recommendations(_message.Message):
    __slots__ = ("items", "scored_by", "fallback_reason", "unknown_item_ids", "history_items_used")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    SCORED_BY_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_REASON_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_ITEM_IDS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_ITEMS_USED_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ScoredItem]
    scored_by: ScoredBy
    fallback_reason: str
    unknown_item_ids: _containers.RepeatedScalarFieldContainer[str]
    history_items_used: int
    def __init__(self, items: _Optional[_Iterable[_Union[ScoredItem, _Mapping]]] = ..., scored_by: _Optional[_Union[ScoredBy, str]] = ..., fallback_reason: _Optional[str] = ..., unknown_item_ids: _Optional[_Iterable[str]] = ..., history_items_used: _Optional[int] = ...) -> None: ...

class RecommendRequest(_message.Message):
    __slots__ = ("model", "history", "k", "exclude_seen")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_SEEN_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    history: History
    k: int
    exclude_seen: bool
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., history: _Optional[_Union[History, _Mapping]] = ..., k: _Optional[int] = ..., exclude_seen: _Optional[bool] = ...) -> None: ...

class RecommendResponse(_message.Message):
    __slots__ = ("recommendations", "model")
    RECOMMENDATIONS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    recommendations: Recommendations
    model: ModelVersionInfo
    def __init__(self, recommendations: _Optional[_Union[Recommendations, _Mapping]] = ..., model: _Optional[_Union[ModelVersionInfo, _Mapping]] = ...) -> None: ...

class RecommendBatchRequest(_message.Message):
    __slots__ = ("model", "histories", "k", "exclude_seen")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    HISTORIES_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_SEEN_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    histories: _containers.RepeatedCompositeFieldContainer[History]
    k: int
    exclude_seen: bool
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., histories: _Optional[_Iterable[_Union[History, _Mapping]]] = ..., k: _Optional[int] = ..., exclude_seen: _Optional[bool] = ...) -> None: ...

class RecommendBatchResponse(_message.Message):
    __slots__ = ("results", "model")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[Recommendations]
    model: ModelVersionInfo
    def __init__(self, results: _Optional[_Iterable[_Union[Recommendations, _Mapping]]] = ..., model: _Optional[_Union[ModelVersionInfo, _Mapping]] = ...) -> None: ...
