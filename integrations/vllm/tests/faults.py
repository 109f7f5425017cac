"""A MemkvConnector whose stored chunks vanish between lookup and load, as when the server
evicts them or loses them in between: the e2e run checks vLLM recomputes them correctly."""

from __future__ import annotations

from typing import Any

from memkv_vllm import keys as K
from memkv_vllm.connector import MemkvConnector, MemkvConnectorMetadata


class EvictingMemkvConnector(MemkvConnector):
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, MemkvConnectorMetadata)
        doomed = [
            K.chunk_key(self._namespace, self._rank, h, layer)
            for transfer in meta.loads
            for h in transfer.hashes[len(transfer.hashes) // 2 :]
            for layer in self._layer_names[-1:]
        ]
        if doomed:
            self._store.call("delete_many", doomed)
        super().start_load_kv(forward_context, **kwargs)
