"""vLLM's ``vllm.general_plugins`` entry point: registers the memkv tier by name.

vLLM runs every ``vllm.general_plugins`` entry point in each of its processes at start-up
(``vllm.plugins.load_general_plugins``), before the scheduler builds its offloading tiers.
``register`` adds ``"memkv"`` to ``SecondaryTierFactory``, so a tier config needs only
``{"type": "memkv", ...}`` instead of ``{"type": "MemkvTier", "module_path": "memkv_vllm.tier"}``,
and ``"MemKVOffloadingSpec"`` to ``OffloadingSpecFactory``, so ``spec_module_path`` may be left
out. It imports nothing heavy: the modules are imported only when a tier or spec is built.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("vllm.memkv_vllm")

TIER_TYPE = "memkv"
TIER_MODULE = "memkv_vllm.tier"
TIER_CLASS = "MemkvTier"
SPEC_NAME = "MemKVOffloadingSpec"
SPEC_MODULE = "memkv_vllm.spec"


def register() -> None:
    """Register the tier and the spec with vLLM; running it again (another process, a re-run)
    is harmless."""
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    try:
        OffloadingSpecFactory.register_spec(SPEC_NAME, SPEC_MODULE, SPEC_NAME)
    except ValueError:
        pass  # already registered: an earlier call; the factory cannot say to what

    try:
        SecondaryTierFactory.register_tier(TIER_TYPE, TIER_MODULE, TIER_CLASS)
    except ValueError:
        # Already registered: by an earlier call (idempotent), or by something else under our
        # name, which is worth a warning because configs naming "memkv" will not reach us.
        registered = SecondaryTierFactory.get_tier_class({"type": TIER_TYPE})
        if (registered.__module__, registered.__name__) != (TIER_MODULE, TIER_CLASS):
            logger.warning(
                "memkv_vllm: secondary tier type %r is already registered to %s.%s; use "
                '{"type": "%s", "module_path": "%s"} to reach memkv\'s tier',
                TIER_TYPE, registered.__module__, registered.__name__, TIER_CLASS, TIER_MODULE,
            )
