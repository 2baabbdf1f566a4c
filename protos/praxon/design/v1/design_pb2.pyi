from praxon.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EquilibriumSolver(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EQUILIBRIUM_SOLVER_UNSPECIFIED: _ClassVar[EquilibriumSolver]
    EQUILIBRIUM_SOLVER_HEDGE: _ClassVar[EquilibriumSolver]
    EQUILIBRIUM_SOLVER_BEST_RESPONSE: _ClassVar[EquilibriumSolver]
EQUILIBRIUM_SOLVER_UNSPECIFIED: EquilibriumSolver
EQUILIBRIUM_SOLVER_HEDGE: EquilibriumSolver
EQUILIBRIUM_SOLVER_BEST_RESPONSE: EquilibriumSolver

class StartGameOptCampaignJobRequest(_message.Message):
    __slots__ = ("alphabet", "length", "objective", "budget", "batch_size", "solver", "beta", "seed", "idempotency_key")
    ALPHABET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    OBJECTIVE_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    SOLVER_FIELD_NUMBER: _ClassVar[int]
    BETA_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    alphabet: str
    length: int
    objective: str
    budget: int
    batch_size: int
    solver: EquilibriumSolver
    beta: float
    seed: int
    idempotency_key: str
    def __init__(self, alphabet: _Optional[str] = ..., length: _Optional[int] = ..., objective: _Optional[str] = ..., budget: _Optional[int] = ..., batch_size: _Optional[int] = ..., solver: _Optional[_Union[EquilibriumSolver, str]] = ..., beta: _Optional[float] = ..., seed: _Optional[int] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class StartGameOptCampaignJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class StartCrystalGenerationJobRequest(_message.Message):
    __slots__ = ("model", "space_group", "num_samples", "idempotency_key")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SPACE_GROUP_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    space_group: int
    num_samples: int
    idempotency_key: str
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., space_group: _Optional[int] = ..., num_samples: _Optional[int] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class StartCrystalGenerationJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class StartGuidedFlowSamplingJobRequest(_message.Message):
    __slots__ = ("model", "reward", "num_samples", "control_weight", "idempotency_key")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    CONTROL_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    reward: str
    num_samples: int
    control_weight: float
    idempotency_key: str
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., reward: _Optional[str] = ..., num_samples: _Optional[int] = ..., control_weight: _Optional[float] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class StartGuidedFlowSamplingJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...
