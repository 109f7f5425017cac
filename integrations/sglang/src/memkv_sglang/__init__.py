# SPDX-License-Identifier: Apache-2.0
"""memkv as SGLang's HiCache L3 storage: see memkv_sglang.backend.MemKVHiCacheStorage.

The backend module is not imported here: importing it pulls in SGLang and torch,
which SGLang's loader does itself through module_path.
"""

__version__ = "0.1.0"
