# SPDX-License-Identifier: Apache-2.0
"""memkv for LMCache.

* Multiprocess mode (``lmcache server`` with L2 adapters): ``MemkvConnector`` is the
  ``native_plugin`` connector, configured as
  ``{"type": "native_plugin", "module_path": "memkv_lmcache",
  "class_name": "MemkvConnector", "adapter_params": {...}}``; or, to have LMCache's L1
  arena registered for RDMA, the ``plugin`` adapter ``memkv_lmcache.l2.MemkvL2Adapter``:
  ``{"type": "plugin", "module_path": "memkv_lmcache.l2",
  "class_name": "MemkvL2Adapter", "adapter_params": {...}}`` (that module imports lmcache).
* In-process mode (StorageManager inside the vLLM worker):
  ``memkv_lmcache.backend.MemKVStorageBackend``, loaded through ``storage_plugins``.

This module does not import lmcache, so an LMCache server only pays for memkv.
"""

from memkv_lmcache._connector import MemkvConnector
from memkv_lmcache._params import client_kwargs

__all__ = ["MemkvConnector", "client_kwargs", "__version__"]
__version__ = "0.1.0"
