import pytest

from memkv_vllm import keys as K

LAYERS = ("model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn")


def layout(**kw):
    base = dict(model="m@", quantization="none", kv_dtype="torch.bfloat16", cache_dtype="auto",
                block_size=128, num_kv_heads=4, head_size=64, page_bytes=131072,
                layer_names=LAYERS, tp_size=1)
    base.update(kw)
    return K.Layout(**base)


def test_namespace_is_stable_and_separates_layouts():
    assert layout().digest() == layout().digest()
    others = [layout(model="other@"), layout(quantization="fp8"), layout(kv_dtype="torch.float16"),
              layout(cache_dtype="fp8_e5m2"), layout(block_size=16),
              layout(num_kv_heads=8), layout(head_size=128), layout(tp_size=2),
              layout(layer_names=LAYERS[:1]), layout(namespace="tenant-a"), layout(page_bytes=1)]
    digests = {o.digest() for o in others}
    assert len(digests) == len(others) and layout().digest() not in digests


def test_weight_quantization_alone_separates_namespaces():
    # Same model, dtypes and page sizes: only the weights differ, and with them every KV value.
    methods = ["none", "fp8", "awq", "gptq"]
    assert len({layout(quantization=q).digest() for q in methods}) == len(methods)
    assert len({tier_layout(quantization=q).digest() for q in methods}) == len(methods)
    # As keys name it: vLLM's method in lower case, None (unquantized) as "none".
    names = [K.quantization_name(q) for q in (None, "fp8", "AWQ", " gptq ")]
    assert names == ["none", "fp8", "awq", "gptq"]
    for bad in ("", "  ", 8):
        with pytest.raises(ValueError, match="non-empty string"):
            K.quantization_name(bad)


def vllm_connector(model_config, cache_dtype="auto", **parallel):
    """A scheduler-side MemkvConnector built by vLLM's own factory, config and KV cache spec,
    for vLLM's ``model_config`` (the ``served`` fixture)."""
    pytest.importorskip("vllm")
    import torch
    from vllm.config import CacheConfig, KVTransferConfig, VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

    config = VllmConfig(
        model_config=model_config,
        cache_config=CacheConfig(cache_dtype=cache_dtype),
        kv_transfer_config=KVTransferConfig(
            kv_connector="MemkvConnector", kv_connector_module_path="memkv_vllm.connector",
            kv_role="kv_both",
            # Nothing listens on port 1: the warm-up fails fast and is only a future miss.
            kv_connector_extra_config={"servers": ["127.0.0.1:1"], "timeout_ms": 200,
                                       "model_id": "m"}),
    )
    # Set after validation: this CPU build refuses PCP (its V1 model runner lacks it; V2 needs
    # Triton), which GPU builds accept.
    for name, value in parallel.items():
        setattr(config.parallel_config, name, value)
    dtype = torch.bfloat16 if cache_dtype == "auto" else STR_DTYPE_TO_TORCH_DTYPE[cache_dtype]
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype=dtype)
    kv_cache_config = KVCacheConfig(num_blocks=8, kv_cache_tensors=[],
                                    kv_cache_groups=[KVCacheGroupSpec(list(LAYERS), spec)])
    connector = KVConnectorFactory.create_connector(config, KVConnectorRole.SCHEDULER, kv_cache_config)
    connector.shutdown()
    return connector


def test_fp8_formats_sharing_a_storage_dtype_get_different_namespaces(served):
    # vLLM stores fp8_e4m3 and fp8_e5m2 alike as torch.uint8 pages of the same size.
    e4m3, e5m2 = vllm_connector(served(), "fp8_e4m3"), vllm_connector(served(), "fp8_e5m2")
    assert e4m3._page_bytes == e5m2._page_bytes
    assert e4m3._namespace != e5m2._namespace


@pytest.mark.parametrize("parallel, setting", [
    (dict(tensor_parallel_size=2, decode_context_parallel_size=2), "decode_context_parallel_size=2"),
    (dict(prefill_context_parallel_size=2), "prefill_context_parallel_size=2"),
])
def test_context_parallelism_is_refused_naming_the_setting(served, parallel, setting):
    with pytest.raises(ValueError, match=f"context parallelism \\({setting}\\)"):
        vllm_connector(served(), **parallel)


def test_the_connector_keys_the_weights_quantization_vllm_serves(served):
    # The same model path (and the same model_id, "m") with fp8 weights: the same pages, in
    # size and dtype, holding other values. They must never be read for the bf16 weights.
    plain, fp8 = vllm_connector(served()), vllm_connector(served(quantization="fp8"))
    assert (plain._layout.quantization, fp8._layout.quantization) == ("none", "fp8")
    assert plain._layout.model == fp8._layout.model == "m"
    assert plain._page_bytes == fp8._page_bytes
    assert plain._namespace != fp8._namespace


def test_only_whole_chunks_are_hashed():
    seed = K.chain_seed()
    assert K.chunk_hashes(list(range(127)), 128, seed) == []
    assert len(K.chunk_hashes(list(range(128)), 128, seed)) == 1
    assert len(K.chunk_hashes(list(range(4000)), 128, seed)) == 31


def test_chain_covers_the_whole_prefix():
    seed = K.chain_seed()
    a = list(range(512))
    b = a[:]
    b[5] = 9999  # differs in chunk 0 only
    ha, hb = K.chunk_hashes(a, 128, seed), K.chunk_hashes(b, 128, seed)
    assert all(x != y for x, y in zip(ha, hb))  # every later chunk differs too
    c = a[:256] + [7] * 256  # shares two chunks
    hc = K.chunk_hashes(c, 128, seed)
    assert hc[:2] == ha[:2] and hc[2] != ha[2] and hc[3] != ha[3]


def test_seed_separates_adapters_and_salts():
    toks = list(range(256))
    plain = K.chunk_hashes(toks, 128, K.chain_seed())
    lora = K.chunk_hashes(toks, 128, K.chain_seed(["lora:x:/p"]))
    salt = K.chunk_hashes(toks, 128, K.chain_seed(["salt:s"]))
    assert len({plain[0], lora[0], salt[0]}) == 3
    # Length-prefixed parts: ("ab", "c") is not ("a", "bc").
    assert K.chain_seed(["ab", "c"]) != K.chain_seed(["a", "bc"])


def test_incremental_hashing_matches_from_scratch():
    seed = K.chain_seed()
    toks = list(range(1000))
    first = K.chunk_hashes(toks[:300], 128, seed)
    assert K.chunk_hashes(toks, 128, seed, prev=first) == K.chunk_hashes(toks, 128, seed)


def test_token_ids_are_hashed_as_32_bit_values():
    seed = K.chain_seed()
    assert K.chunk_hashes([1] * 128, 128, seed) != K.chunk_hashes([1 + 2**16] * 128, 128, seed)


def test_keys_name_rank_chunk_and_layer():
    keys = K.chunk_keys("ns", 3, "ab" * 16, LAYERS)
    assert keys == [f"vllm/ns/tp3/{'ab' * 16}/{layer}" for layer in LAYERS]
    assert K.chunk_key("ns", 0, "h", "l") != K.chunk_key("ns", 1, "h", "l")
    assert all(len(k.encode()) < 512 for k in keys)  # memkv accepts keys up to 512 bytes always


def test_leading_hits_needs_every_key_of_a_chunk():
    assert K.leading_hits([True] * 6, 2) == 3
    assert K.leading_hits([True, True, True, False, True, True], 2) == 1
    assert K.leading_hits([False, True, True, True], 2) == 0
    assert K.leading_hits([], 2) == 0
    with pytest.raises(ValueError, match="keys_per_chunk"):
        K.leading_hits([True], 0)


def test_bad_block_size_is_refused():
    with pytest.raises(ValueError, match="block_size"):
        K.chunk_hashes([1, 2], 0, K.chain_seed())


def tier_layout(**kw):
    base = dict(model="m@", quantization="none", kv_dtype="bfloat16", tokens_per_hash=16,
                blocks_per_chunk=1,
                groups=((16, LAYERS),), world_size=1, tp_size=1, pp_size=1, pcp_size=1,
                dcp_size=1, replicated_layout=False, canonical_layout=False,
                kv_cache_layout=None, chunk_bytes=65536)
    base.update(kw)
    return K.TierLayout(**base)


def test_tier_namespace_separates_everything_that_changes_a_chunks_bytes():
    assert tier_layout().digest() == tier_layout().digest()
    others = [tier_layout(model="o@"), tier_layout(model="m@v2"), tier_layout(quantization="fp8"),
              tier_layout(kv_dtype="float16"),
              tier_layout(tokens_per_hash=32), tier_layout(blocks_per_chunk=2),
              tier_layout(groups=((16, LAYERS[:1]),)), tier_layout(world_size=2, tp_size=2),
              tier_layout(world_size=2, pp_size=2), tier_layout(dcp_size=2),
              tier_layout(pcp_size=2), tier_layout(replicated_layout=True),
              tier_layout(canonical_layout=True), tier_layout(kv_cache_layout="HND"),
              tier_layout(chunk_bytes=4096), tier_layout(namespace="tenant-a")]
    digests = {o.digest() for o in others} | {tier_layout().digest()}
    assert len(digests) == len(others) + 1
    # Never the connector's namespace either, even for equal-looking fields.
    assert tier_layout().digest() != layout().digest()


def test_tier_keys_name_the_ranks_a_value_holds():
    assert tier_layout().ranks() == "ranks0-0"
    assert tier_layout(world_size=4, tp_size=4).ranks() == "ranks0-3"
    assert tier_layout(world_size=4, tp_size=4, replicated_layout=True).ranks() == "ranks0-0"
    assert K.tier_key("ns", "ranks0-1", bytes([0xAB, 0x01]), 2) == "vllm/ns/ranks0-1/ab01/g2"
