# SPDX-License-Identifier: Apache-2.0
"""Fixtures: real memkv servers on loopback, SGLang storage configs, real host KV pools.

Everything goes through SGLang 0.5.23's own classes: the backend is built by
StorageBackendFactory's "dynamic" loader from a HiCacheStorageConfig, and the host pools
are SGLang's MHATokenToKVPoolHost / MLATokenToKVPoolHost over small CPU device pools.
"""

from __future__ import annotations

import os
import secrets
import sys

import pytest
import torch
from memkv.testing import MemkvServer
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
from sglang.srt.mem_cache.device_pool_info import MambaStateBufferInfo
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool
from sglang.srt.mem_cache.pool_host.mamba import MambaPoolHost
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost
from sglang.srt.mem_cache.storage import StorageBackendFactory

from memkv_sglang.backend import MemKVHiCacheStorage

PAGE_SIZE = 4
LAYERS = 3
# torch builds SGLang's page-hash C++ extension on first use with ninja, found on PATH; the
# venv's bin holds the pinned ninja even when the venv is not activated.
os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])

# Client deadline for the tests: short, so a stopped server turns into a miss fast.
TIMEOUT_MS = 3000


@pytest.fixture(autouse=True)
def _no_memkv_env(monkeypatch):
    # A developer's MEMKV_* must not point the tests at some other cluster.
    for name in list(os.environ):
        if name.startswith("MEMKV_") and name != "MEMKV_BIN":
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def server():
    with MemkvServer(max_size="256 MiB") as srv:
        yield srv


@pytest.fixture
def model_name():
    """A fresh model name per test, so tests sharing a server never see each other's pages."""
    return f"test-org/tiny-{secrets.token_hex(4)}"


def storage_config(
    *,
    model_name: str,
    extra: dict,
    mla: bool = False,
    tp_rank: int = 0,
    tp_size: int = 1,
    pp_rank: int = 0,
    pp_size: int = 1,
    metrics: bool = False,
    page_first: bool = True,
) -> HiCacheStorageConfig:
    return HiCacheStorageConfig(
        tp_rank=tp_rank,
        tp_size=tp_size,
        pp_rank=pp_rank,
        pp_size=pp_size,
        attn_cp_rank=0,
        attn_cp_size=1,
        is_mla_model=mla,
        enable_storage_metrics=metrics,
        is_page_first_layout=page_first,
        model_name=model_name,
        extra_config=dict(extra),
    )


def dynamic_extra(servers=None, auth_key=None, v1=False, **more) -> dict:
    extra = {
        "backend_name": "memkv",
        "module_path": "memkv_sglang.backend",
        "class_name": "MemKVHiCacheStorage",
        "timeout_ms": TIMEOUT_MS,
        **more,
    }
    if servers is not None:
        extra["servers"] = servers
    if auth_key is not None:
        extra["auth_key"] = auth_key
    if v1:
        extra["interface_v1"] = 1
    return extra


def create(cfg: HiCacheStorageConfig, host_pool=None) -> MemKVHiCacheStorage:
    """Build and attach the backend exactly as HiCacheController.attach_storage_backend does."""
    backend = StorageBackendFactory.create_backend("dynamic", cfg, host_pool)
    if host_pool is not None:
        backend.register_mem_pool_host(host_pool)
    return backend


@pytest.fixture
def make_backend(server, model_name):
    made = []

    def make(
        *, host_pool=None, v1=False, servers=None, auth_key=None, **cfg_kw
    ) -> MemKVHiCacheStorage:
        cfg_kw.setdefault("model_name", model_name)
        extra = dynamic_extra(
            servers=servers or [server.address],
            auth_key=auth_key or server.auth_key,
            v1=v1,
        )
        backend = create(storage_config(extra=extra, **cfg_kw), host_pool)
        made.append(backend)
        return backend

    yield make
    for b in made:
        b.close()


def mha_host_pool(
    layout: str = "page_first", dtype=torch.bfloat16, start_layer: int = 0, layers: int = LAYERS
) -> MHATokenToKVPoolHost:
    """start_layer and layers: the model layers a pipeline stage holds."""
    device = MHATokenToKVPool(
        512, PAGE_SIZE, dtype, 2, 8, layers, "cpu", False,
        v_head_dim=8, start_layer=start_layer, end_layer=start_layer + layers - 1,
    )
    return MHATokenToKVPoolHost(
        device.get_device_pool_infos()[0].buffer_info, 2.0, 0, PAGE_SIZE, layout,
        pin_memory=False, device_capacity_tokens=device.size,
        start_layer=device.start_layer, end_layer=device.end_layer,
        write_back_staging=device.hicache_write_back_staging,
    )


def mla_host_pool(layout: str = "page_first", dtype=torch.bfloat16) -> MLATokenToKVPoolHost:
    device = MLATokenToKVPool(
        512, PAGE_SIZE, dtype, 16, 8, LAYERS, "cpu", False,
        start_layer=0, end_layer=LAYERS - 1,
    )
    return MLATokenToKVPoolHost(
        device.get_device_pool_infos()[0].buffer_info, 2.0, 0, PAGE_SIZE, layout,
        pin_memory=False, device_capacity_tokens=device.size,
        start_layer=device.start_layer, end_layer=device.end_layer, target_layer_num=LAYERS,
    )


def mamba_host_pool(
    slots: int = 64, layout: str = "page_first", side_state: bool = False
) -> MambaPoolHost:
    """SGLang's Mamba state host pool (one state per slot, page_size 1) over small CPU
    "device" state tensors: 2 layers, a float32 temporal state and one bf16 conv state;
    ``side_state`` adds a per-slot extra checkpoint buffer, which SGLang's zero-copy page
    ranges do not cover."""
    extra = (torch.zeros(slots, 5, dtype=torch.float32),) if side_state else ()
    info = MambaStateBufferInfo(
        temporal=torch.zeros(2, slots, 4, 8, dtype=torch.float32),
        conv=(torch.zeros(2, slots, 6, 3, dtype=torch.bfloat16),),
        extra_checkpoint_buffers=extra,
    )
    return MambaPoolHost(
        info, 2.0, 0, device_capacity=slots, pin_memory=False, layout=layout
    )


def fill_mamba(pool: MambaPoolHost, slots: torch.Tensor, seed: int) -> None:
    """Random states into the given slots of a Mamba host pool."""
    g = torch.Generator().manual_seed(seed)
    for buf in (pool.temporal_buffer, *pool.conv_buffer, *pool.slot_state_buffers):
        for i in slots.tolist():
            buf[i] = torch.randn(buf[i].shape, generator=g).to(buf.dtype)


def mamba_bytes(pool: MambaPoolHost, slots: torch.Tensor) -> list[bytes]:
    """Each slot's state as SGLang's flat page, for bit-exact comparison."""
    return [pool.get_data_page(i, flat=True).numpy().tobytes() for i in slots.tolist()]


def fill_random(pool, host_indices: torch.Tensor, seed: int) -> None:
    """Random bytes into the given pages of a host pool, through SGLang's page accessors."""
    g = torch.Generator().manual_seed(seed)
    for start in range(0, len(host_indices), pool.page_size):
        page = pool.get_data_page(int(host_indices[start]), flat=True)
        data = torch.randn(page.shape, generator=g).to(page.dtype)
        pool.set_from_flat_data_page(int(host_indices[start]), data)


def page_bytes(pool, host_indices: torch.Tensor) -> list[bytes]:
    """Each page's bytes as SGLang sees them (flat page), for bit-exact comparison."""
    return [
        pool.get_data_page(int(host_indices[s]), flat=True)
        .contiguous().view(torch.uint8).numpy().tobytes()
        for s in range(0, len(host_indices), pool.page_size)
    ]


def hashes(n: int, tag: str = "") -> list[str]:
    return [f"{secrets.token_hex(16)}{tag}" for _ in range(n)]
