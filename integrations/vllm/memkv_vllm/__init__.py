"""memkv as vLLM's KV-cache store: ``memkv_vllm.connector.MemkvConnector``."""

__version__ = "0.1.0"
