from praxon.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CrystalGenerationMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CRYSTAL_GENERATION_METHOD_UNSPECIFIED: _ClassVar[CrystalGenerationMethod]
    CRYSTAL_GENERATION_METHOD_MODEL: _ClassVar[CrystalGenerationMethod]
    CRYSTAL_GENERATION_METHOD_PYXTAL_RANDOM: _ClassVar[CrystalGenerationMethod]
CRYSTAL_GENERATION_METHOD_UNSPECIFIED: CrystalGenerationMethod
CRYSTAL_GENERATION_METHOD_MODEL: CrystalGenerationMethod
CRYSTAL_GENERATION_METHOD_PYXTAL_RANDOM: CrystalGenerationMethod

class StartImportCrystalsJobRequest(_message.Message):
    __slots__ = ("artifact_ids", "builtin", "n_random", "include_shipped", "seed", "name", "idempotency_key")
    ARTIFACT_IDS_FIELD_NUMBER: _ClassVar[int]
    BUILTIN_FIELD_NUMBER: _ClassVar[int]
    N_RANDOM_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_SHIPPED_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    artifact_ids: _containers.RepeatedScalarFieldContainer[str]
    builtin: bool
    n_random: int
    include_shipped: bool
    seed: int
    name: str
    idempotency_key: str
    def __init__(self, artifact_ids: _Optional[_Iterable[str]] = ..., builtin: _Optional[bool] = ..., n_random: _Optional[int] = ..., include_shipped: _Optional[bool] = ..., seed: _Optional[int] = ..., name: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class StartImportCrystalsJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class CrystalTrainingParams(_message.Message):
    __slots__ = ("steps", "batch_size", "lr", "hidden", "layers", "timesteps", "cost_lattice", "cost_coord", "cost_type", "cost_symm", "seed", "checkpoint_every", "device", "threads")
    STEPS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    LR_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    TIMESTEPS_FIELD_NUMBER: _ClassVar[int]
    COST_LATTICE_FIELD_NUMBER: _ClassVar[int]
    COST_COORD_FIELD_NUMBER: _ClassVar[int]
    COST_TYPE_FIELD_NUMBER: _ClassVar[int]
    COST_SYMM_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_EVERY_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    steps: int
    batch_size: int
    lr: float
    hidden: int
    layers: int
    timesteps: int
    cost_lattice: float
    cost_coord: float
    cost_type: float
    cost_symm: float
    seed: int
    checkpoint_every: int
    device: str
    threads: int
    def __init__(self, steps: _Optional[int] = ..., batch_size: _Optional[int] = ..., lr: _Optional[float] = ..., hidden: _Optional[int] = ..., layers: _Optional[int] = ..., timesteps: _Optional[int] = ..., cost_lattice: _Optional[float] = ..., cost_coord: _Optional[float] = ..., cost_type: _Optional[float] = ..., cost_symm: _Optional[float] = ..., seed: _Optional[int] = ..., checkpoint_every: _Optional[int] = ..., device: _Optional[str] = ..., threads: _Optional[int] = ...) -> None: ...

class StartCrystalTrainingJobRequest(_message.Message):
    __slots__ = ("dataset_artifact_id", "model_name", "remove_symmetry", "params", "idempotency_key")
    DATASET_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    REMOVE_SYMMETRY_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    dataset_artifact_id: str
    model_name: str
    remove_symmetry: bool
    params: CrystalTrainingParams
    idempotency_key: str
    def __init__(self, dataset_artifact_id: _Optional[str] = ..., model_name: _Optional[str] = ..., remove_symmetry: _Optional[bool] = ..., params: _Optional[_Union[CrystalTrainingParams, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class StartCrystalTrainingJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class SpaceGroupWeight(_message.Message):
    __slots__ = ("space_group", "weight")
    SPACE_GROUP_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    space_group: int
    weight: float
    def __init__(self, space_group: _Optional[int] = ..., weight: _Optional[float] = ...) -> None: ...

class AtomCountRange(_message.Message):
    __slots__ = ("min", "max")
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    min: int
    max: int
    def __init__(self, min: _Optional[int] = ..., max: _Optional[int] = ...) -> None: ...

class StartCrystalGenerationJobRequest(_message.Message):
    __slots__ = ("model", "space_group", "space_group_distribution", "atom_count_range", "composition_hints", "num_samples", "method", "reference_dataset_artifact_id", "seed", "batch_size", "idempotency_key", "sampling_steps", "max_retries", "formula", "require_valid_composition")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SPACE_GROUP_FIELD_NUMBER: _ClassVar[int]
    SPACE_GROUP_DISTRIBUTION_FIELD_NUMBER: _ClassVar[int]
    ATOM_COUNT_RANGE_FIELD_NUMBER: _ClassVar[int]
    COMPOSITION_HINTS_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_DATASET_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_STEPS_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    FORMULA_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_VALID_COMPOSITION_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    space_group: int
    space_group_distribution: _containers.RepeatedCompositeFieldContainer[SpaceGroupWeight]
    atom_count_range: AtomCountRange
    composition_hints: _containers.RepeatedScalarFieldContainer[str]
    num_samples: int
    method: CrystalGenerationMethod
    reference_dataset_artifact_id: str
    seed: int
    batch_size: int
    idempotency_key: str
    sampling_steps: int
    max_retries: int
    formula: str
    require_valid_composition: bool
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., space_group: _Optional[int] = ..., space_group_distribution: _Optional[_Iterable[_Union[SpaceGroupWeight, _Mapping]]] = ..., atom_count_range: _Optional[_Union[AtomCountRange, _Mapping]] = ..., composition_hints: _Optional[_Iterable[str]] = ..., num_samples: _Optional[int] = ..., method: _Optional[_Union[CrystalGenerationMethod, str]] = ..., reference_dataset_artifact_id: _Optional[str] = ..., seed: _Optional[int] = ..., batch_size: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., sampling_steps: _Optional[int] = ..., max_retries: _Optional[int] = ..., formula: _Optional[str] = ..., require_valid_composition: _Optional[bool] = ...) -> None: ...

class StartCrystalGenerationJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class GetCrystalSetRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class CrystalRow(_message.Message):
    __slots__ = ("index", "requested_space_group", "detected_space_group", "space_group_match", "structurally_valid", "compositionally_valid", "invariant", "formula", "n_atoms", "volume", "density", "min_distance", "wyckoff", "cif_artifact_id", "requested_ops_found", "draws", "first_draw_space_group_match", "first_draw_structurally_valid", "failed", "reason", "first_draw_compositionally_valid")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_SPACE_GROUP_FIELD_NUMBER: _ClassVar[int]
    DETECTED_SPACE_GROUP_FIELD_NUMBER: _ClassVar[int]
    SPACE_GROUP_MATCH_FIELD_NUMBER: _ClassVar[int]
    STRUCTURALLY_VALID_FIELD_NUMBER: _ClassVar[int]
    COMPOSITIONALLY_VALID_FIELD_NUMBER: _ClassVar[int]
    INVARIANT_FIELD_NUMBER: _ClassVar[int]
    FORMULA_FIELD_NUMBER: _ClassVar[int]
    N_ATOMS_FIELD_NUMBER: _ClassVar[int]
    VOLUME_FIELD_NUMBER: _ClassVar[int]
    DENSITY_FIELD_NUMBER: _ClassVar[int]
    MIN_DISTANCE_FIELD_NUMBER: _ClassVar[int]
    WYCKOFF_FIELD_NUMBER: _ClassVar[int]
    CIF_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_OPS_FOUND_FIELD_NUMBER: _ClassVar[int]
    DRAWS_FIELD_NUMBER: _ClassVar[int]
    FIRST_DRAW_SPACE_GROUP_MATCH_FIELD_NUMBER: _ClassVar[int]
    FIRST_DRAW_STRUCTURALLY_VALID_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FIRST_DRAW_COMPOSITIONALLY_VALID_FIELD_NUMBER: _ClassVar[int]
    index: int
    requested_space_group: int
    detected_space_group: int
    space_group_match: bool
    structurally_valid: bool
    compositionally_valid: bool
    invariant: bool
    formula: str
    n_atoms: int
    volume: float
    density: float
    min_distance: float
    wyckoff: _containers.RepeatedScalarFieldContainer[str]
    cif_artifact_id: str
    requested_ops_found: bool
    draws: int
    first_draw_space_group_match: bool
    first_draw_structurally_valid: bool
    failed: bool
    reason: str
    first_draw_compositionally_valid: bool
    def __init__(self, index: _Optional[int] = ..., requested_space_group: _Optional[int] = ..., detected_space_group: _Optional[int] = ..., space_group_match: _Optional[bool] = ..., structurally_valid: _Optional[bool] = ..., compositionally_valid: _Optional[bool] = ..., invariant: _Optional[bool] = ..., formula: _Optional[str] = ..., n_atoms: _Optional[int] = ..., volume: _Optional[float] = ..., density: _Optional[float] = ..., min_distance: _Optional[float] = ..., wyckoff: _Optional[_Iterable[str]] = ..., cif_artifact_id: _Optional[str] = ..., requested_ops_found: _Optional[bool] = ..., draws: _Optional[int] = ..., first_draw_space_group_match: _Optional[bool] = ..., first_draw_structurally_valid: _Optional[bool] = ..., failed: _Optional[bool] = ..., reason: _Optional[str] = ..., first_draw_compositionally_valid: _Optional[bool] = ...) -> None: ...

class GroupAnswer(_message.Message):
    __slots__ = ("space_group", "requested", "generated", "matched", "reason")
    SPACE_GROUP_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    GENERATED_FIELD_NUMBER: _ClassVar[int]
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    space_group: int
    requested: int
    generated: int
    matched: int
    reason: str
    def __init__(self, space_group: _Optional[int] = ..., requested: _Optional[int] = ..., generated: _Optional[int] = ..., matched: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class CrystalSetSummary(_message.Message):
    __slots__ = ("n_requested", "n_generated", "structural_validity", "compositional_validity", "validity", "space_group_match_rate", "invariant_rate", "space_group_jsd", "density_wasserstein", "n_elements_wasserstein", "crystals_per_second", "method", "requested_ops_found_rate", "first_draw_space_group_match_rate", "first_draw_structural_validity", "n_redrawn", "extra_draws", "first_draw_compositional_validity", "n_failed", "groups")
    N_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    N_GENERATED_FIELD_NUMBER: _ClassVar[int]
    STRUCTURAL_VALIDITY_FIELD_NUMBER: _ClassVar[int]
    COMPOSITIONAL_VALIDITY_FIELD_NUMBER: _ClassVar[int]
    VALIDITY_FIELD_NUMBER: _ClassVar[int]
    SPACE_GROUP_MATCH_RATE_FIELD_NUMBER: _ClassVar[int]
    INVARIANT_RATE_FIELD_NUMBER: _ClassVar[int]
    SPACE_GROUP_JSD_FIELD_NUMBER: _ClassVar[int]
    DENSITY_WASSERSTEIN_FIELD_NUMBER: _ClassVar[int]
    N_ELEMENTS_WASSERSTEIN_FIELD_NUMBER: _ClassVar[int]
    CRYSTALS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_OPS_FOUND_RATE_FIELD_NUMBER: _ClassVar[int]
    FIRST_DRAW_SPACE_GROUP_MATCH_RATE_FIELD_NUMBER: _ClassVar[int]
    FIRST_DRAW_STRUCTURAL_VALIDITY_FIELD_NUMBER: _ClassVar[int]
    N_REDRAWN_FIELD_NUMBER: _ClassVar[int]
    EXTRA_DRAWS_FIELD_NUMBER: _ClassVar[int]
    FIRST_DRAW_COMPOSITIONAL_VALIDITY_FIELD_NUMBER: _ClassVar[int]
    N_FAILED_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    n_requested: int
    n_generated: int
    structural_validity: float
    compositional_validity: float
    validity: float
    space_group_match_rate: float
    invariant_rate: float
    space_group_jsd: float
    density_wasserstein: float
    n_elements_wasserstein: float
    crystals_per_second: float
    method: str
    requested_ops_found_rate: float
    first_draw_space_group_match_rate: float
    first_draw_structural_validity: float
    n_redrawn: int
    extra_draws: int
    first_draw_compositional_validity: float
    n_failed: int
    groups: _containers.RepeatedCompositeFieldContainer[GroupAnswer]
    def __init__(self, n_requested: _Optional[int] = ..., n_generated: _Optional[int] = ..., structural_validity: _Optional[float] = ..., compositional_validity: _Optional[float] = ..., validity: _Optional[float] = ..., space_group_match_rate: _Optional[float] = ..., invariant_rate: _Optional[float] = ..., space_group_jsd: _Optional[float] = ..., density_wasserstein: _Optional[float] = ..., n_elements_wasserstein: _Optional[float] = ..., crystals_per_second: _Optional[float] = ..., method: _Optional[str] = ..., requested_ops_found_rate: _Optional[float] = ..., first_draw_space_group_match_rate: _Optional[float] = ..., first_draw_structural_validity: _Optional[float] = ..., n_redrawn: _Optional[int] = ..., extra_draws: _Optional[int] = ..., first_draw_compositional_validity: _Optional[float] = ..., n_failed: _Optional[int] = ..., groups: _Optional[_Iterable[_Union[GroupAnswer, _Mapping]]] = ...) -> None: ...

class CrystalSet(_message.Message):
    __slots__ = ("job_id", "summary", "rows", "report_artifact_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    REPORT_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    summary: CrystalSetSummary
    rows: _containers.RepeatedCompositeFieldContainer[CrystalRow]
    report_artifact_id: str
    def __init__(self, job_id: _Optional[str] = ..., summary: _Optional[_Union[CrystalSetSummary, _Mapping]] = ..., rows: _Optional[_Iterable[_Union[CrystalRow, _Mapping]]] = ..., report_artifact_id: _Optional[str] = ...) -> None: ...

class GetCrystalSetResponse(_message.Message):
    __slots__ = ("crystal_set",)
    CRYSTAL_SET_FIELD_NUMBER: _ClassVar[int]
    crystal_set: CrystalSet
    def __init__(self, crystal_set: _Optional[_Union[CrystalSet, _Mapping]] = ...) -> None: ...
