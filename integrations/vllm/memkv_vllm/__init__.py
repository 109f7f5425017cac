"""memkv as vLLM's KV-cache store: the KV connector ``memkv_vllm.connector.MemkvConnector``,
or the secondary offloading tier ``memkv_vllm.tier.MemkvTier`` (``{"type": "memkv"}`` through
the ``vllm.general_plugins`` entry point ``memkv_vllm.plugin:register``)."""

__version__ = "0.1.0"
