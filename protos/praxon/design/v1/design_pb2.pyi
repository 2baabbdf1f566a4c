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

class Direction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DIRECTION_UNSPECIFIED: _ClassVar[Direction]
    DIRECTION_MAXIMIZE: _ClassVar[Direction]
    DIRECTION_MINIMIZE: _ClassVar[Direction]

class EquilibriumSolver(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EQUILIBRIUM_SOLVER_UNSPECIFIED: _ClassVar[EquilibriumSolver]
    EQUILIBRIUM_SOLVER_HEDGE: _ClassVar[EquilibriumSolver]
    EQUILIBRIUM_SOLVER_BEST_RESPONSE: _ClassVar[EquilibriumSolver]

class Kernel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KERNEL_UNSPECIFIED: _ClassVar[Kernel]
    KERNEL_ONE_HOT_RBF: _ClassVar[Kernel]
    KERNEL_CATEGORICAL: _ClassVar[Kernel]

class OracleKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ORACLE_KIND_UNSPECIFIED: _ClassVar[OracleKind]
    ORACLE_KIND_EHRLICH: _ClassVar[OracleKind]
    ORACLE_KIND_EXHAUSTIVE: _ClassVar[OracleKind]
DIRECTION_UNSPECIFIED: Direction
DIRECTION_MAXIMIZE: Direction
DIRECTION_MINIMIZE: Direction
EQUILIBRIUM_SOLVER_UNSPECIFIED: EquilibriumSolver
EQUILIBRIUM_SOLVER_HEDGE: EquilibriumSolver
EQUILIBRIUM_SOLVER_BEST_RESPONSE: EquilibriumSolver
KERNEL_UNSPECIFIED: Kernel
KERNEL_ONE_HOT_RBF: Kernel
KERNEL_CATEGORICAL: Kernel
ORACLE_KIND_UNSPECIFIED: OracleKind
ORACLE_KIND_EHRLICH: OracleKind
ORACLE_KIND_EXHAUSTIVE: OracleKind

class Oracle(_message.Message):
    __slots__ = ("kind", "num_motifs", "motif_length", "quantization", "seed")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NUM_MOTIFS_FIELD_NUMBER: _ClassVar[int]
    MOTIF_LENGTH_FIELD_NUMBER: _ClassVar[int]
    QUANTIZATION_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    kind: OracleKind
    num_motifs: int
    motif_length: int
    quantization: int
    seed: int
    def __init__(self, kind: _Optional[_Union[OracleKind, str]] = ..., num_motifs: _Optional[int] = ..., motif_length: _Optional[int] = ..., quantization: _Optional[int] = ..., seed: _Optional[int] = ...) -> None: ...

class Constraints(_message.Message):
    __slots__ = ("allowed_letters", "parents", "max_edits", "forbidden_motifs")
    ALLOWED_LETTERS_FIELD_NUMBER: _ClassVar[int]
    PARENTS_FIELD_NUMBER: _ClassVar[int]
    MAX_EDITS_FIELD_NUMBER: _ClassVar[int]
    FORBIDDEN_MOTIFS_FIELD_NUMBER: _ClassVar[int]
    allowed_letters: _containers.RepeatedScalarFieldContainer[str]
    parents: _containers.RepeatedScalarFieldContainer[str]
    max_edits: int
    forbidden_motifs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, allowed_letters: _Optional[_Iterable[str]] = ..., parents: _Optional[_Iterable[str]] = ..., max_edits: _Optional[int] = ..., forbidden_motifs: _Optional[_Iterable[str]] = ...) -> None: ...

class Campaign(_message.Message):
    __slots__ = ("id", "name", "alphabet", "length", "constraints", "batch_size", "direction", "noise_std", "oracle", "observation_count", "round_count", "best", "create_time")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALPHABET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    NOISE_STD_FIELD_NUMBER: _ClassVar[int]
    ORACLE_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_COUNT_FIELD_NUMBER: _ClassVar[int]
    ROUND_COUNT_FIELD_NUMBER: _ClassVar[int]
    BEST_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    alphabet: str
    length: int
    constraints: Constraints
    batch_size: int
    direction: Direction
    noise_std: float
    oracle: Oracle
    observation_count: int
    round_count: int
    best: Observation
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., alphabet: _Optional[str] = ..., length: _Optional[int] = ..., constraints: _Optional[_Union[Constraints, _Mapping]] = ..., batch_size: _Optional[int] = ..., direction: _Optional[_Union[Direction, str]] = ..., noise_std: _Optional[float] = ..., oracle: _Optional[_Union[Oracle, _Mapping]] = ..., observation_count: _Optional[int] = ..., round_count: _Optional[int] = ..., best: _Optional[_Union[Observation, _Mapping]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Observation(_message.Message):
    __slots__ = ("sequence", "value", "replicate", "source_job_id", "round", "observe_time", "failed")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    REPLICATE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    OBSERVE_TIME_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    sequence: str
    value: float
    replicate: int
    source_job_id: str
    round: int
    observe_time: _timestamp_pb2.Timestamp
    failed: bool
    def __init__(self, sequence: _Optional[str] = ..., value: _Optional[float] = ..., replicate: _Optional[int] = ..., source_job_id: _Optional[str] = ..., round: _Optional[int] = ..., observe_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., failed: _Optional[bool] = ...) -> None: ...

class CreateCampaignRequest(_message.Message):
    __slots__ = ("name", "alphabet", "length", "constraints", "batch_size", "direction", "noise_std", "oracle")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALPHABET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    NOISE_STD_FIELD_NUMBER: _ClassVar[int]
    ORACLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    alphabet: str
    length: int
    constraints: Constraints
    batch_size: int
    direction: Direction
    noise_std: float
    oracle: Oracle
    def __init__(self, name: _Optional[str] = ..., alphabet: _Optional[str] = ..., length: _Optional[int] = ..., constraints: _Optional[_Union[Constraints, _Mapping]] = ..., batch_size: _Optional[int] = ..., direction: _Optional[_Union[Direction, str]] = ..., noise_std: _Optional[float] = ..., oracle: _Optional[_Union[Oracle, _Mapping]] = ...) -> None: ...

class CreateCampaignResponse(_message.Message):
    __slots__ = ("campaign",)
    CAMPAIGN_FIELD_NUMBER: _ClassVar[int]
    campaign: Campaign
    def __init__(self, campaign: _Optional[_Union[Campaign, _Mapping]] = ...) -> None: ...

class GetCampaignRequest(_message.Message):
    __slots__ = ("campaign_id",)
    CAMPAIGN_ID_FIELD_NUMBER: _ClassVar[int]
    campaign_id: str
    def __init__(self, campaign_id: _Optional[str] = ...) -> None: ...

class GetCampaignResponse(_message.Message):
    __slots__ = ("campaign",)
    CAMPAIGN_FIELD_NUMBER: _ClassVar[int]
    campaign: Campaign
    def __init__(self, campaign: _Optional[_Union[Campaign, _Mapping]] = ...) -> None: ...

class ListCampaignsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListCampaignsResponse(_message.Message):
    __slots__ = ("campaigns", "next_page_token")
    CAMPAIGNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    campaigns: _containers.RepeatedCompositeFieldContainer[Campaign]
    next_page_token: str
    def __init__(self, campaigns: _Optional[_Iterable[_Union[Campaign, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ObserveRequest(_message.Message):
    __slots__ = ("campaign_id", "observations", "use_oracle")
    CAMPAIGN_ID_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    USE_ORACLE_FIELD_NUMBER: _ClassVar[int]
    campaign_id: str
    observations: _containers.RepeatedCompositeFieldContainer[Observation]
    use_oracle: bool
    def __init__(self, campaign_id: _Optional[str] = ..., observations: _Optional[_Iterable[_Union[Observation, _Mapping]]] = ..., use_oracle: _Optional[bool] = ...) -> None: ...

class ObserveResponse(_message.Message):
    __slots__ = ("inserted", "duplicates", "observation_count", "values", "failed")
    INSERTED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_COUNT_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    inserted: int
    duplicates: int
    observation_count: int
    values: _containers.RepeatedScalarFieldContainer[float]
    failed: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, inserted: _Optional[int] = ..., duplicates: _Optional[int] = ..., observation_count: _Optional[int] = ..., values: _Optional[_Iterable[float]] = ..., failed: _Optional[_Iterable[bool]] = ...) -> None: ...

class StartSuggestionJobRequest(_message.Message):
    __slots__ = ("campaign_id", "solver", "batch_size", "beta", "rounds", "eta", "games", "group_size", "kernel", "seed", "idempotency_key", "trust_radius")
    CAMPAIGN_ID_FIELD_NUMBER: _ClassVar[int]
    SOLVER_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    BETA_FIELD_NUMBER: _ClassVar[int]
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    ETA_FIELD_NUMBER: _ClassVar[int]
    GAMES_FIELD_NUMBER: _ClassVar[int]
    GROUP_SIZE_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TRUST_RADIUS_FIELD_NUMBER: _ClassVar[int]
    campaign_id: str
    solver: EquilibriumSolver
    batch_size: int
    beta: float
    rounds: int
    eta: float
    games: int
    group_size: int
    kernel: Kernel
    seed: int
    idempotency_key: str
    trust_radius: int
    def __init__(self, campaign_id: _Optional[str] = ..., solver: _Optional[_Union[EquilibriumSolver, str]] = ..., batch_size: _Optional[int] = ..., beta: _Optional[float] = ..., rounds: _Optional[int] = ..., eta: _Optional[float] = ..., games: _Optional[int] = ..., group_size: _Optional[int] = ..., kernel: _Optional[_Union[Kernel, str]] = ..., seed: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., trust_radius: _Optional[int] = ...) -> None: ...

class StartSuggestionJobResponse(_message.Message):
    __slots__ = ("job", "round")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    round: int
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ..., round: _Optional[int] = ...) -> None: ...

class GetSuggestionsRequest(_message.Message):
    __slots__ = ("campaign_id", "job_id")
    CAMPAIGN_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    campaign_id: str
    job_id: str
    def __init__(self, campaign_id: _Optional[str] = ..., job_id: _Optional[str] = ...) -> None: ...

class Suggestion(_message.Message):
    __slots__ = ("sequence", "ucb", "mean", "std", "source")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    UCB_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    STD_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    sequence: str
    ucb: float
    mean: float
    std: float
    source: str
    def __init__(self, sequence: _Optional[str] = ..., ucb: _Optional[float] = ..., mean: _Optional[float] = ..., std: _Optional[float] = ..., source: _Optional[str] = ...) -> None: ...

class GetSuggestionsResponse(_message.Message):
    __slots__ = ("job", "round", "suggestions")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    SUGGESTIONS_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    round: int
    suggestions: _containers.RepeatedCompositeFieldContainer[Suggestion]
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ..., round: _Optional[int] = ..., suggestions: _Optional[_Iterable[_Union[Suggestion, _Mapping]]] = ...) -> None: ...

class GetCampaignReportRequest(_message.Message):
    __slots__ = ("campaign_id",)
    CAMPAIGN_ID_FIELD_NUMBER: _ClassVar[int]
    campaign_id: str
    def __init__(self, campaign_id: _Optional[str] = ...) -> None: ...

class ReportRow(_message.Message):
    __slots__ = ("round", "observations", "cumulative", "best_in_round", "best_so_far", "best_sequence")
    ROUND_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    CUMULATIVE_FIELD_NUMBER: _ClassVar[int]
    BEST_IN_ROUND_FIELD_NUMBER: _ClassVar[int]
    BEST_SO_FAR_FIELD_NUMBER: _ClassVar[int]
    BEST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    round: int
    observations: int
    cumulative: int
    best_in_round: float
    best_so_far: float
    best_sequence: str
    def __init__(self, round: _Optional[int] = ..., observations: _Optional[int] = ..., cumulative: _Optional[int] = ..., best_in_round: _Optional[float] = ..., best_so_far: _Optional[float] = ..., best_sequence: _Optional[str] = ...) -> None: ...

class GetCampaignReportResponse(_message.Message):
    __slots__ = ("campaign", "rows", "plot_png", "plot", "table")
    CAMPAIGN_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    PLOT_PNG_FIELD_NUMBER: _ClassVar[int]
    PLOT_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    campaign: Campaign
    rows: _containers.RepeatedCompositeFieldContainer[ReportRow]
    plot_png: bytes
    plot: _common_pb2.ArtifactRef
    table: str
    def __init__(self, campaign: _Optional[_Union[Campaign, _Mapping]] = ..., rows: _Optional[_Iterable[_Union[ReportRow, _Mapping]]] = ..., plot_png: _Optional[bytes] = ..., plot: _Optional[_Union[_common_pb2.ArtifactRef, _Mapping]] = ..., table: _Optional[str] = ...) -> None: ...
