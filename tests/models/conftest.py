"""Shared fixtures for model tests: tiny random HF checkpoints saved once per session."""

import pytest

from tests.models.hf_reference import hf_config, random_model


@pytest.fixture(scope="session")
def hf_checkpoint(tmp_path_factory):
    """family -> (directory written by transformers' save_pretrained, the torch model)."""
    made = {}

    def get(family: str):
        if family not in made:
            model = random_model(hf_config(family))
            path = tmp_path_factory.mktemp(f"hf_{family}")
            model.save_pretrained(path)
            made[family] = (str(path), model)
        return made[family]

    return get
