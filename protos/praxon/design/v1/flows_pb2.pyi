from praxon.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FlowDataset(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FLOW_DATASET_UNSPECIFIED: _ClassVar[FlowDataset]
    FLOW_DATASET_GMM_2D: _ClassVar[FlowDataset]
    FLOW_DATASET_POINT_CLOUD: _ClassVar[FlowDataset]
    FLOW_DATASET_SO3_MIXTURE: _ClassVar[FlowDataset]

class FlowTrainingMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FLOW_TRAINING_METHOD_UNSPECIFIED: _ClassVar[FlowTrainingMethod]
    FLOW_TRAINING_METHOD_CFM: _ClassVar[FlowTrainingMethod]
    FLOW_TRAINING_METHOD_EFM: _ClassVar[FlowTrainingMethod]
    FLOW_TRAINING_METHOD_ANALYTIC: _ClassVar[FlowTrainingMethod]

class RewardKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REWARD_KIND_UNSPECIFIED: _ClassVar[RewardKind]
    REWARD_KIND_DISTANCE: _ClassVar[RewardKind]
    REWARD_KIND_LOG_DENSITY: _ClassVar[RewardKind]
    REWARD_KIND_PREDICTOR: _ClassVar[RewardKind]

class GuidanceMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GUIDANCE_METHOD_UNSPECIFIED: _ClassVar[GuidanceMethod]
    GUIDANCE_METHOD_OC_FLOW: _ClassVar[GuidanceMethod]
    GUIDANCE_METHOD_D_FLOW: _ClassVar[GuidanceMethod]
    GUIDANCE_METHOD_FLOWGRAD: _ClassVar[GuidanceMethod]
    GUIDANCE_METHOD_UNGUIDED: _ClassVar[GuidanceMethod]
FLOW_DATASET_UNSPECIFIED: FlowDataset
FLOW_DATASET_GMM_2D: FlowDataset
FLOW_DATASET_POINT_CLOUD: FlowDataset
FLOW_DATASET_SO3_MIXTURE: FlowDataset
FLOW_TRAINING_METHOD_UNSPECIFIED: FlowTrainingMethod
FLOW_TRAINING_METHOD_CFM: FlowTrainingMethod
FLOW_TRAINING_METHOD_EFM: FlowTrainingMethod
FLOW_TRAINING_METHOD_ANALYTIC: FlowTrainingMethod
REWARD_KIND_UNSPECIFIED: RewardKind
REWARD_KIND_DISTANCE: RewardKind
REWARD_KIND_LOG_DENSITY: RewardKind
REWARD_KIND_PREDICTOR: RewardKind
GUIDANCE_METHOD_UNSPECIFIED: GuidanceMethod
GUIDANCE_METHOD_OC_FLOW: GuidanceMethod
GUIDANCE_METHOD_D_FLOW: GuidanceMethod
GUIDANCE_METHOD_FLOWGRAD: GuidanceMethod
GUIDANCE_METHOD_UNGUIDED: GuidanceMethod

class FlowTrainingOptions(_message.Message):
    __slots__ = ("steps", "batch_size", "learning_rate", "hidden", "layers", "num_data", "seed")
    STEPS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    NUM_DATA_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    steps: int
    batch_size: int
    learning_rate: float
    hidden: int
    layers: int
    num_data: int
    seed: int
    def __init__(self, steps: _Optional[int] = ..., batch_size: _Optional[int] = ..., learning_rate: _Optional[float] = ..., hidden: _Optional[int] = ..., layers: _Optional[int] = ..., num_data: _Optional[int] = ..., seed: _Optional[int] = ...) -> None: ...

class QuadraticEnergy(_message.Message):
    __slots__ = ("center", "beta")
    CENTER_FIELD_NUMBER: _ClassVar[int]
    BETA_FIELD_NUMBER: _ClassVar[int]
    center: _containers.RepeatedScalarFieldContainer[float]
    beta: float
    def __init__(self, center: _Optional[_Iterable[float]] = ..., beta: _Optional[float] = ...) -> None: ...

class StartFlowTrainingJobRequest(_message.Message):
    __slots__ = ("name", "builtin", "dataset_artifact_id", "method", "energy", "options", "idempotency_key")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BUILTIN_FIELD_NUMBER: _ClassVar[int]
    DATASET_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    ENERGY_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    name: str
    builtin: FlowDataset
    dataset_artifact_id: str
    method: FlowTrainingMethod
    energy: QuadraticEnergy
    options: FlowTrainingOptions
    idempotency_key: str
    def __init__(self, name: _Optional[str] = ..., builtin: _Optional[_Union[FlowDataset, str]] = ..., dataset_artifact_id: _Optional[str] = ..., method: _Optional[_Union[FlowTrainingMethod, str]] = ..., energy: _Optional[_Union[QuadraticEnergy, _Mapping]] = ..., options: _Optional[_Union[FlowTrainingOptions, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class StartFlowTrainingJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class StartRewardPredictorTrainingJobRequest(_message.Message):
    __slots__ = ("name", "builtin", "dataset_artifact_id", "options", "idempotency_key")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BUILTIN_FIELD_NUMBER: _ClassVar[int]
    DATASET_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    name: str
    builtin: FlowDataset
    dataset_artifact_id: str
    options: FlowTrainingOptions
    idempotency_key: str
    def __init__(self, name: _Optional[str] = ..., builtin: _Optional[_Union[FlowDataset, str]] = ..., dataset_artifact_id: _Optional[str] = ..., options: _Optional[_Union[FlowTrainingOptions, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class StartRewardPredictorTrainingJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class RewardTerm(_message.Message):
    __slots__ = ("kind", "weight", "target", "scale", "predictor")
    KIND_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    PREDICTOR_FIELD_NUMBER: _ClassVar[int]
    kind: RewardKind
    weight: float
    target: _containers.RepeatedScalarFieldContainer[float]
    scale: float
    predictor: _common_pb2.ModelRef
    def __init__(self, kind: _Optional[_Union[RewardKind, str]] = ..., weight: _Optional[float] = ..., target: _Optional[_Iterable[float]] = ..., scale: _Optional[float] = ..., predictor: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ...) -> None: ...

class StartGuidedFlowSamplingJobRequest(_message.Message):
    __slots__ = ("flow", "reward", "control_cost", "steps", "iterations", "method", "num_samples", "learning_rate", "seed", "idempotency_key")
    FLOW_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    CONTROL_COST_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    flow: _common_pb2.ModelRef
    reward: _containers.RepeatedCompositeFieldContainer[RewardTerm]
    control_cost: float
    steps: int
    iterations: int
    method: GuidanceMethod
    num_samples: int
    learning_rate: float
    seed: int
    idempotency_key: str
    def __init__(self, flow: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., reward: _Optional[_Iterable[_Union[RewardTerm, _Mapping]]] = ..., control_cost: _Optional[float] = ..., steps: _Optional[int] = ..., iterations: _Optional[int] = ..., method: _Optional[_Union[GuidanceMethod, str]] = ..., num_samples: _Optional[int] = ..., learning_rate: _Optional[float] = ..., seed: _Optional[int] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class StartGuidedFlowSamplingJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...
