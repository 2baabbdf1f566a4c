"""Shared fixtures: the MiniLM encoder, the seed set and a guard fitted on its train split, computed once per
session. Torch runs single-threaded here: on shared, busy cores one thread is several times faster than two."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def encoder():
    from services.common.minilm import get_base_encoder

    return get_base_encoder()


@pytest.fixture(scope="session")
def seed_rows():
    from services.moderation.schema import load_seed_dataset

    return load_seed_dataset()


@pytest.fixture(scope="session")
def seed_split(seed_rows):
    return [r for r in seed_rows if r.split == "train"], [r for r in seed_rows if r.split == "validation"]


@pytest.fixture(scope="session")
def seed_features(encoder, seed_rows):
    """phi for every seed row, a response with its prompt (the encoder caches embeddings by text)."""
    from services.moderation.jobs.train_guard import example_features

    return example_features(None, seed_rows)


@pytest.fixture(scope="session")
def guard(encoder, seed_rows, seed_features):
    from services.moderation.guard import (
        GuardModel,
        Targets,
        base_config,
        fit_frozen_linear,
    )

    tr = np.array([r.split == "train" for r in seed_rows])
    heads = fit_frozen_linear(seed_features[tr], Targets.from_examples([r for r in seed_rows if r.split == "train"]),
                              1e-3)
    return GuardModel("frozen_linear", heads, base_config("frozen_linear", encoder, 1e-3), encoder)


@pytest.fixture(scope="session")
def scorer(encoder, seed_split):
    from services.moderation.policies import train_policy_scorer

    return train_policy_scorer(encoder, seed_split[0])
