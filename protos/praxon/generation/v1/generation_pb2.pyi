from praxon.common.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CachePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CACHE_POLICY_UNSPECIFIED: _ClassVar[CachePolicy]
    CACHE_POLICY_NONE: _ClassVar[CachePolicy]
    CACHE_POLICY_VL_CACHE: _ClassVar[CachePolicy]
    CACHE_POLICY_H2O: _ClassVar[CachePolicy]
    CACHE_POLICY_STREAMING_LLM: _ClassVar[CachePolicy]

class UncertaintyMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UNCERTAINTY_METHOD_UNSPECIFIED: _ClassVar[UncertaintyMethod]
    UNCERTAINTY_METHOD_SDLG: _ClassVar[UncertaintyMethod]
    UNCERTAINTY_METHOD_MULTINOMIAL: _ClassVar[UncertaintyMethod]
    UNCERTAINTY_METHOD_PREDICTIVE: _ClassVar[UncertaintyMethod]
    UNCERTAINTY_METHOD_LEXICAL: _ClassVar[UncertaintyMethod]

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_CANCELLED: _ClassVar[FinishReason]
CACHE_POLICY_UNSPECIFIED: CachePolicy
CACHE_POLICY_NONE: CachePolicy
CACHE_POLICY_VL_CACHE: CachePolicy
CACHE_POLICY_H2O: CachePolicy
CACHE_POLICY_STREAMING_LLM: CachePolicy
UNCERTAINTY_METHOD_UNSPECIFIED: UncertaintyMethod
UNCERTAINTY_METHOD_SDLG: UncertaintyMethod
UNCERTAINTY_METHOD_MULTINOMIAL: UncertaintyMethod
UNCERTAINTY_METHOD_PREDICTIVE: UncertaintyMethod
UNCERTAINTY_METHOD_LEXICAL: UncertaintyMethod
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_CANCELLED: FinishReason

class KvCompression(_message.Message):
    __slots__ = ("policy", "retention", "window", "observation_window", "threshold", "sinks")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    RETENTION_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_WINDOW_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    SINKS_FIELD_NUMBER: _ClassVar[int]
    policy: CachePolicy
    retention: float
    window: int
    observation_window: int
    threshold: float
    sinks: int
    def __init__(self, policy: _Optional[_Union[CachePolicy, str]] = ..., retention: _Optional[float] = ..., window: _Optional[int] = ..., observation_window: _Optional[int] = ..., threshold: _Optional[float] = ..., sinks: _Optional[int] = ...) -> None: ...

class SamplingParams(_message.Message):
    __slots__ = ("max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop", "top_logprobs", "ignore_eos")
    MAX_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    max_new_tokens: int
    temperature: float
    top_k: int
    top_p: float
    seed: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    top_logprobs: int
    ignore_eos: bool
    def __init__(self, max_new_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_k: _Optional[int] = ..., top_p: _Optional[float] = ..., seed: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., top_logprobs: _Optional[int] = ..., ignore_eos: _Optional[bool] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("model", "prompt", "sampling", "kv_compression", "uncertainty")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    KV_COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    UNCERTAINTY_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    prompt: str
    sampling: SamplingParams
    kv_compression: KvCompression
    uncertainty: UncertaintyOptions
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., prompt: _Optional[str] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., kv_compression: _Optional[_Union[KvCompression, _Mapping]] = ..., uncertainty: _Optional[_Union[UncertaintyOptions, _Mapping]] = ...) -> None: ...

class UncertaintyOptions(_message.Message):
    __slots__ = ("method", "num_generations", "nli_model", "question", "num_beams")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    NUM_GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    NLI_MODEL_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    NUM_BEAMS_FIELD_NUMBER: _ClassVar[int]
    method: UncertaintyMethod
    num_generations: int
    nli_model: _common_pb2.ModelRef
    question: str
    num_beams: int
    def __init__(self, method: _Optional[_Union[UncertaintyMethod, str]] = ..., num_generations: _Optional[int] = ..., nli_model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., question: _Optional[str] = ..., num_beams: _Optional[int] = ...) -> None: ...

class UncertaintyGeneration(_message.Message):
    __slots__ = ("text", "log_likelihood", "num_tokens", "weight", "origin", "word_index", "substituted_token", "token_probability", "cluster")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LOG_LIKELIHOOD_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    WORD_INDEX_FIELD_NUMBER: _ClassVar[int]
    SUBSTITUTED_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOKEN_PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    text: str
    log_likelihood: float
    num_tokens: int
    weight: float
    origin: str
    word_index: int
    substituted_token: str
    token_probability: float
    cluster: int
    def __init__(self, text: _Optional[str] = ..., log_likelihood: _Optional[float] = ..., num_tokens: _Optional[int] = ..., weight: _Optional[float] = ..., origin: _Optional[str] = ..., word_index: _Optional[int] = ..., substituted_token: _Optional[str] = ..., token_probability: _Optional[float] = ..., cluster: _Optional[int] = ...) -> None: ...

class SemanticCluster(_message.Message):
    __slots__ = ("members", "mass", "log_mass")
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    MASS_FIELD_NUMBER: _ClassVar[int]
    LOG_MASS_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedScalarFieldContainer[int]
    mass: float
    log_mass: float
    def __init__(self, members: _Optional[_Iterable[int]] = ..., mass: _Optional[float] = ..., log_mass: _Optional[float] = ...) -> None: ...

class UncertaintyResult(_message.Message):
    __slots__ = ("method", "answer", "entropy", "semantic_entropy", "predictive_entropy", "lexical_similarity", "clusters", "generations", "nli_model", "seconds_generate", "seconds_cluster")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    ENTROPY_FIELD_NUMBER: _ClassVar[int]
    SEMANTIC_ENTROPY_FIELD_NUMBER: _ClassVar[int]
    PREDICTIVE_ENTROPY_FIELD_NUMBER: _ClassVar[int]
    LEXICAL_SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    GENERATIONS_FIELD_NUMBER: _ClassVar[int]
    NLI_MODEL_FIELD_NUMBER: _ClassVar[int]
    SECONDS_GENERATE_FIELD_NUMBER: _ClassVar[int]
    SECONDS_CLUSTER_FIELD_NUMBER: _ClassVar[int]
    method: UncertaintyMethod
    answer: str
    entropy: float
    semantic_entropy: float
    predictive_entropy: float
    lexical_similarity: float
    clusters: _containers.RepeatedCompositeFieldContainer[SemanticCluster]
    generations: _containers.RepeatedCompositeFieldContainer[UncertaintyGeneration]
    nli_model: ModelInfo
    seconds_generate: float
    seconds_cluster: float
    def __init__(self, method: _Optional[_Union[UncertaintyMethod, str]] = ..., answer: _Optional[str] = ..., entropy: _Optional[float] = ..., semantic_entropy: _Optional[float] = ..., predictive_entropy: _Optional[float] = ..., lexical_similarity: _Optional[float] = ..., clusters: _Optional[_Iterable[_Union[SemanticCluster, _Mapping]]] = ..., generations: _Optional[_Iterable[_Union[UncertaintyGeneration, _Mapping]]] = ..., nli_model: _Optional[_Union[ModelInfo, _Mapping]] = ..., seconds_generate: _Optional[float] = ..., seconds_cluster: _Optional[float] = ...) -> None: ...

class GenerateStreamRequest(_message.Message):
    __slots__ = ("model", "prompt", "sampling", "kv_compression", "uncertainty")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    KV_COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    UNCERTAINTY_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    prompt: str
    sampling: SamplingParams
    kv_compression: KvCompression
    uncertainty: UncertaintyOptions
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., prompt: _Optional[str] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., kv_compression: _Optional[_Union[KvCompression, _Mapping]] = ..., uncertainty: _Optional[_Union[UncertaintyOptions, _Mapping]] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ("token_id", "text", "logprob")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    text: str
    logprob: float
    def __init__(self, token_id: _Optional[int] = ..., text: _Optional[str] = ..., logprob: _Optional[float] = ...) -> None: ...

class Token(_message.Message):
    __slots__ = ("token_id", "text", "logprob", "top_logprobs")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    text: str
    logprob: float
    top_logprobs: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    def __init__(self, token_id: _Optional[int] = ..., text: _Optional[str] = ..., logprob: _Optional[float] = ..., top_logprobs: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "time_to_first_token_s")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TIME_TO_FIRST_TOKEN_S_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    time_to_first_token_s: float
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., time_to_first_token_s: _Optional[float] = ...) -> None: ...

class CacheStats(_message.Message):
    __slots__ = ("policy", "kept_bytes", "full_bytes", "prompt_kept_fraction", "layer_budgets")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    KEPT_BYTES_FIELD_NUMBER: _ClassVar[int]
    FULL_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROMPT_KEPT_FRACTION_FIELD_NUMBER: _ClassVar[int]
    LAYER_BUDGETS_FIELD_NUMBER: _ClassVar[int]
    policy: CachePolicy
    kept_bytes: int
    full_bytes: int
    prompt_kept_fraction: float
    layer_budgets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, policy: _Optional[_Union[CachePolicy, str]] = ..., kept_bytes: _Optional[int] = ..., full_bytes: _Optional[int] = ..., prompt_kept_fraction: _Optional[float] = ..., layer_budgets: _Optional[_Iterable[int]] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "version", "model_version_id", "model_type", "context_length")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_TYPE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    model_version_id: str
    model_type: str
    context_length: int
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ..., model_version_id: _Optional[str] = ..., model_type: _Optional[str] = ..., context_length: _Optional[int] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("text", "tokens", "finish_reason", "usage", "cache", "model", "uncertainty")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    UNCERTAINTY_FIELD_NUMBER: _ClassVar[int]
    text: str
    tokens: _containers.RepeatedCompositeFieldContainer[Token]
    finish_reason: FinishReason
    usage: Usage
    cache: CacheStats
    model: ModelInfo
    uncertainty: UncertaintyResult
    def __init__(self, text: _Optional[str] = ..., tokens: _Optional[_Iterable[_Union[Token, _Mapping]]] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., cache: _Optional[_Union[CacheStats, _Mapping]] = ..., model: _Optional[_Union[ModelInfo, _Mapping]] = ..., uncertainty: _Optional[_Union[UncertaintyResult, _Mapping]] = ...) -> None: ...

class GenerateStreamResponse(_message.Message):
    __slots__ = ("token", "finish_reason", "usage", "cache", "model", "uncertainty")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    UNCERTAINTY_FIELD_NUMBER: _ClassVar[int]
    token: Token
    finish_reason: FinishReason
    usage: Usage
    cache: CacheStats
    model: ModelInfo
    uncertainty: UncertaintyResult
    def __init__(self, token: _Optional[_Union[Token, _Mapping]] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., cache: _Optional[_Union[CacheStats, _Mapping]] = ..., model: _Optional[_Union[ModelInfo, _Mapping]] = ..., uncertainty: _Optional[_Union[UncertaintyResult, _Mapping]] = ...) -> None: ...

class CountTokensRequest(_message.Message):
    __slots__ = ("model", "text")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    model: _common_pb2.ModelRef
    text: str
    def __init__(self, model: _Optional[_Union[_common_pb2.ModelRef, _Mapping]] = ..., text: _Optional[str] = ...) -> None: ...

class CountTokensResponse(_message.Message):
    __slots__ = ("count", "token_ids", "model")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    count: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    model: ModelInfo
    def __init__(self, count: _Optional[int] = ..., token_ids: _Optional[_Iterable[int]] = ..., model: _Optional[_Union[ModelInfo, _Mapping]] = ...) -> None: ...

class LanguageModelTrainingParams(_message.Message):
    __slots__ = ("steps", "batch_size", "lr", "vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "max_seq_len", "seed", "builtin_retrieval_docs", "builtin_max_records", "steps_per_checkpoint", "builtin_min_records", "builtin_lookups", "builtin_tasks", "init_std", "builtin_copy_docs", "copy_warmup_steps", "builtin_value_words")
    STEPS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    LR_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    NUM_HEADS_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_HEADS_FIELD_NUMBER: _ClassVar[int]
    MAX_SEQ_LEN_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    BUILTIN_RETRIEVAL_DOCS_FIELD_NUMBER: _ClassVar[int]
    BUILTIN_MAX_RECORDS_FIELD_NUMBER: _ClassVar[int]
    STEPS_PER_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    BUILTIN_MIN_RECORDS_FIELD_NUMBER: _ClassVar[int]
    BUILTIN_LOOKUPS_FIELD_NUMBER: _ClassVar[int]
    BUILTIN_TASKS_FIELD_NUMBER: _ClassVar[int]
    INIT_STD_FIELD_NUMBER: _ClassVar[int]
    BUILTIN_COPY_DOCS_FIELD_NUMBER: _ClassVar[int]
    COPY_WARMUP_STEPS_FIELD_NUMBER: _ClassVar[int]
    BUILTIN_VALUE_WORDS_FIELD_NUMBER: _ClassVar[int]
    steps: int
    batch_size: int
    lr: float
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    max_seq_len: int
    seed: int
    builtin_retrieval_docs: int
    builtin_max_records: int
    steps_per_checkpoint: int
    builtin_min_records: int
    builtin_lookups: int
    builtin_tasks: str
    init_std: float
    builtin_copy_docs: int
    copy_warmup_steps: int
    builtin_value_words: int
    def __init__(self, steps: _Optional[int] = ..., batch_size: _Optional[int] = ..., lr: _Optional[float] = ..., vocab_size: _Optional[int] = ..., hidden_size: _Optional[int] = ..., num_layers: _Optional[int] = ..., num_heads: _Optional[int] = ..., num_kv_heads: _Optional[int] = ..., max_seq_len: _Optional[int] = ..., seed: _Optional[int] = ..., builtin_retrieval_docs: _Optional[int] = ..., builtin_max_records: _Optional[int] = ..., steps_per_checkpoint: _Optional[int] = ..., builtin_min_records: _Optional[int] = ..., builtin_lookups: _Optional[int] = ..., builtin_tasks: _Optional[str] = ..., init_std: _Optional[float] = ..., builtin_copy_docs: _Optional[int] = ..., copy_warmup_steps: _Optional[int] = ..., builtin_value_words: _Optional[int] = ...) -> None: ...

class StartLanguageModelTrainingJobRequest(_message.Message):
    __slots__ = ("corpus_artifact_id", "model_name", "idempotency_key", "params")
    CORPUS_ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    corpus_artifact_id: str
    model_name: str
    idempotency_key: str
    params: LanguageModelTrainingParams
    def __init__(self, corpus_artifact_id: _Optional[str] = ..., model_name: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., params: _Optional[_Union[LanguageModelTrainingParams, _Mapping]] = ...) -> None: ...

class StartLanguageModelTrainingJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class StartImportLanguageModelJobRequest(_message.Message):
    __slots__ = ("model_name", "path", "artifact_id", "idempotency_key")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    path: str
    artifact_id: str
    idempotency_key: str
    def __init__(self, model_name: _Optional[str] = ..., path: _Optional[str] = ..., artifact_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class StartImportLanguageModelJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class NLITrainingParams(_message.Message):
    __slots__ = ("train_pairs", "heldout_pairs", "steps", "batch_size", "lr", "steps_per_checkpoint", "seed")
    TRAIN_PAIRS_FIELD_NUMBER: _ClassVar[int]
    HELDOUT_PAIRS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    LR_FIELD_NUMBER: _ClassVar[int]
    STEPS_PER_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    train_pairs: int
    heldout_pairs: int
    steps: int
    batch_size: int
    lr: float
    steps_per_checkpoint: int
    seed: int
    def __init__(self, train_pairs: _Optional[int] = ..., heldout_pairs: _Optional[int] = ..., steps: _Optional[int] = ..., batch_size: _Optional[int] = ..., lr: _Optional[float] = ..., steps_per_checkpoint: _Optional[int] = ..., seed: _Optional[int] = ...) -> None: ...

class StartNLITrainingJobRequest(_message.Message):
    __slots__ = ("model_name", "params", "idempotency_key")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    params: NLITrainingParams
    idempotency_key: str
    def __init__(self, model_name: _Optional[str] = ..., params: _Optional[_Union[NLITrainingParams, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class StartNLITrainingJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...

class StartImportNLIModelJobRequest(_message.Message):
    __slots__ = ("model_name", "artifact_id", "path", "idempotency_key")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    artifact_id: str
    path: str
    idempotency_key: str
    def __init__(self, model_name: _Optional[str] = ..., artifact_id: _Optional[str] = ..., path: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class StartImportNLIModelJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ...) -> None: ...
