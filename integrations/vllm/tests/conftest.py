"""Fixtures shared by the tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A model folder holding only a small Llama's config.json: enough for vLLM's ModelConfig
    (weights are never loaded here), without downloads."""
    transformers = pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("tiny-llama")
    transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=128, intermediate_size=256, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=512, max_position_embeddings=2048,
    ).save_pretrained(path)
    return str(path)


@pytest.fixture
def served(tiny_model: str) -> Callable[..., Any]:
    """``served(quantization=None, revision=None)``: vLLM's own ModelConfig of ``tiny_model``
    served with that ``--quantization`` and ``--revision``."""
    pytest.importorskip("vllm")
    from vllm.config import ModelConfig

    def make(quantization: str | None = None, revision: str | None = None) -> Any:
        return ModelConfig(model=tiny_model, quantization=quantization, revision=revision,
                           skip_tokenizer_init=True, dtype="bfloat16")

    return make
