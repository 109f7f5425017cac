import pytest
import torch

from memkv_vllm.pages import LayerPages, host_ranges, range_view


def cache(blocks=8, layers=2):
    # vLLM's CPU layout: one allocation, [layers, blocks, kv heads, tokens, K|V channels].
    return torch.zeros(layers, blocks, 4, 16, 32, dtype=torch.bfloat16)


def test_pages_are_views_of_the_cache_itself():
    kv = cache()
    lp = LayerPages("l0", kv[0], 8, 4 * 16 * 32 * 2)
    assert lp.zero_copy
    (view,) = lp.read_views([3])
    kv[0, 3].fill_(1.5)
    assert bytes(view) == kv[0, 3].contiguous().view(torch.uint8).numpy().tobytes()
    (target,), commit = lp.write_views([5])
    target[:] = bytes(view)
    commit([True])
    assert torch.equal(kv[0, 5], kv[0, 3]) and not kv[0, 4].any()


def test_layers_of_one_allocation_register_as_one_range():
    kv = cache()
    page = 4 * 16 * 32 * 2
    layers = [LayerPages(f"l{i}", kv[i], 8, page) for i in range(2)]
    ((start, end),) = host_ranges(layers)
    assert (start, end - start) == (kv.data_ptr(), kv.numel() * 2)
    assert len(range_view(start, end)) == kv.numel() * 2
    apart = [LayerPages("a", cache(layers=1)[0], 8, page), LayerPages("b", cache(layers=1)[0], 8, page)]
    assert len(host_ranges(apart)) == 2


def test_non_contiguous_pages_are_staged():
    # Blocks first, but a page's two halves lie apart (as in a [2, blocks, ...] K/V layout).
    kv = torch.zeros(2, 8, 4, 16, 32, dtype=torch.bfloat16).transpose(0, 1)[:, 0].transpose(1, 2)
    lp = LayerPages("l", kv, 8, 4 * 16 * 32 * 2)
    assert not lp.zero_copy
    kv[2].fill_(3)
    (src,) = lp.read_views([2])
    bufs, commit = lp.write_views([6, 7])
    bufs[0][:] = bytes(src)
    commit([True, False])
    assert torch.equal(kv[6], kv[2]) and not kv[7].any()


def test_wrong_shapes_are_refused_with_the_numbers():
    kv = cache()
    with pytest.raises(ValueError, match="does not have the scheduler's 9 blocks"):
        LayerPages("l0", kv[0], 9, 4096)
    with pytest.raises(ValueError, match="a block holds 4096 bytes but the KV cache spec says 100"):
        LayerPages("l0", kv[0], 8, 100)
    with pytest.raises(IndexError, match="block 8 outside"):
        LayerPages("l0", kv[0], 8, 4096).read_views([8])
