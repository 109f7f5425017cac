"""What a memkv load costs the other requests in the engine: loads in the step against
asynchronous loads (the connector's ``load_async``), side by side in one run, on this machine's
CPU.

    python load_overlap.py [--tokens 16000] [--rounds 2] [--json results.json]

Starts a memkv server and a tiny random-weight Llama (as e2e.py does), saves a long prompt P
with one engine, then for each mode (alternating, ``--rounds`` times) runs a fresh engine that
decodes a short request R (``--decode`` tokens) and, once R is decoding, receives P, whose KV
is loaded from memkv. It prints R's gaps between tokens (the step times the other requests
see) around P's load, and P's time to its first token. Times are measured, never asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from e2e import make_llm, make_model, prompts, run_engine

BLOCK = 128


def engine(spec: dict) -> dict:
    """Runs in a fresh process: R decodes, P arrives after ``settle`` of R's tokens."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    llm = make_llm(spec)
    core = llm.llm_engine
    decode = SamplingParams(max_tokens=spec["decode"], ignore_eos=True, detokenize=False, temperature=0)
    one = SamplingParams(max_tokens=1, detokenize=False, temperature=0)
    core.add_request("R", TokensPrompt(prompt_token_ids=list(range(1, 65))), decode)
    r_times: list[float] = []
    p_sent = p_first = None
    while core.has_unfinished_requests():
        for out in core.step():
            now = time.perf_counter()
            if out.request_id == "R":
                r_times.extend([now] * (len(out.outputs[0].token_ids) - len(r_times)))
            elif out.request_id == "P" and out.outputs[0].token_ids and p_first is None:
                p_first = now
        if p_sent is None and len(r_times) >= spec["settle"]:
            p_sent = time.perf_counter()
            core.add_request("P", TokensPrompt(prompt_token_ids=prompts(spec["tokens"])["P"]), one)
    gaps = [b - a for a, b in zip(r_times, r_times[1:])]
    assert p_sent is not None and p_first is not None, "P was never served"
    # R's gaps from P's arrival until P's first token: the steps P's load and prefill touched.
    during = [b - a for a, b in zip(r_times, r_times[1:]) if b > p_sent and a < p_first]
    return {"gaps": gaps, "during": during, "p_ttft": p_first - p_sent}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=16000, help="length of P (default 16000)")
    ap.add_argument("--decode", type=int, default=120, help="tokens R decodes (default 120)")
    ap.add_argument("--rounds", type=int, default=2, help="engines per mode (default 2)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per vLLM process")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()

    from memkv.testing import MemkvServer

    results: dict[str, list[dict]] = {"in the step": [], "async": []}
    with tempfile.TemporaryDirectory(prefix="memkv-vllm-overlap-") as tmp:
        work = Path(tmp)
        make_model(work / "model")
        base = {"model": str(work / "model"), "tokens": args.tokens, "max_len": max(8192, args.tokens + 256),
                "connector": "MemkvConnector", "module": "memkv_vllm.connector"}
        with MemkvServer(max_size="1 GiB") as srv:
            extra = {"servers": [srv.address], "auth_key": srv.auth_key, "timeout_ms": 10000}
            run_engine("save", dict(base, extra=extra, prompts=["P"]), work, args.timeout)
            for i in range(args.rounds):
                for mode, load_async in (("in the step", False), ("async", True)):
                    spec = dict(base, entry="load_overlap:engine", decode=args.decode, settle=20,
                                extra=dict(extra, load_async=load_async))
                    r = run_engine(f"{'async' if load_async else 'step'}-{i}", spec, work, args.timeout)
                    loads = r.pop("_memkv")["loads"]
                    want = (args.tokens - 1) // BLOCK
                    if loads != [(want, want)]:
                        print(f"FAIL: {mode} engine loaded {loads}, want [({want}, {want})]")
                        return 1
                    results[mode].append(r)

    print(f"P: {args.tokens} tokens, {(args.tokens - 1) // BLOCK} chunks loaded from memkv; "
          f"R decodes {args.decode} tokens; {args.rounds} engine(s) per mode")
    print(f"{'mode':12s} {'R gap p50 ms':>13s} {'R worst gap while P loads ms':>29s} {'P first token ms':>17s}")
    summary = {}
    for mode, runs in results.items():
        p50 = statistics.median(g for r in runs for g in r["gaps"]) * 1e3
        worst = [max(r["during"], default=0.0) * 1e3 for r in runs]
        ttft = [r["p_ttft"] * 1e3 for r in runs]
        summary[mode] = {"r_gap_p50_ms": p50, "r_worst_gap_ms": worst, "p_ttft_ms": ttft}
        print(f"{mode:12s} {p50:13.1f} {' / '.join(f'{w:.1f}' for w in worst):>29s} "
              f"{' / '.join(f'{t:.1f}' for t in ttft):>17s}")
    for mode, runs in results.items():
        for i, r in enumerate(runs):
            print(f"{mode}, engine {i + 1}: R's gaps from P's arrival to its first token (ms): "
                  + ", ".join(f"{g * 1e3:.1f}" for g in r["during"]))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "runs": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
