"""End to end: vLLM serves a repeated prompt from memkv, on this machine's CPU.

    python e2e.py [--tokens 4000] [--json results.json]

Makes a tiny random-weight Llama, starts a memkv server, then runs fresh vLLM processes, each
serving the prompts with greedy sampling and max_tokens=1 (so the time is the prefill):

  memkv-A    prompt P through MemkvConnector: computed, its KV saved to memkv
  memkv-B    a fresh engine, same P: KV loaded from memkv; then Q (P's first half, then other
             tokens): the shared chunks load, the rest is computed
  files-A/B  the same with vLLM's ExampleConnector (safetensors files on the same disk)
  evict      keys deleted between lookup and load: the load fails, vLLM recomputes

Loads are asynchronous (the connector's default ``load_async``): vLLM holds each request back
while its load runs and the connector reports it loaded, failed blocks included.
  down       the memkv server stopped: nothing found, everything computed

and checks every answer against the recomputed one, that B loaded every chunk from memkv (the
connector's counters and the server's stored bytes) and prints the prefill times and ratios.
Times are measured, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BLOCK = 128  # vLLM's KV block on the CPU build; chunks are whole blocks


def make_model(path: Path) -> None:
    """A 4-layer Llama with random weights (no downloads), as vLLM's CPU build loads it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        num_hidden_layers=4, hidden_size=512, intermediate_size=1024, num_attention_heads=8,
        num_key_value_heads=4, vocab_size=4096, max_position_embeddings=16384,
    )
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(path)


def prompts(n_tokens: int) -> dict[str, list[int]]:
    rng = random.Random(19)
    p = [rng.randrange(4096) for _ in range(n_tokens)]
    half = (n_tokens // 2) // BLOCK * BLOCK
    q = p[:half] + [rng.randrange(4096) for _ in range(n_tokens - half)]
    return {"P": p, "Q": q}


# ---------------------------------------------------------------------------- one engine


def make_llm(spec: dict) -> Any:
    """One vLLM engine with the spec's connector; its one-time start-up work already done."""
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig
    from vllm.inputs import TokensPrompt

    ktc = KVTransferConfig(
        kv_connector=spec["connector"],
        kv_connector_module_path=spec.get("module"),
        kv_role="kv_both",
        kv_connector_extra_config=spec["extra"],
    )
    # ExampleConnector saves only the part of a prompt computed in its first step, then tries
    # to load the whole prompt; give it one step for the whole prompt (chunked prefill splits
    # prompts over 4,096 tokens otherwise). MemkvConnector saves each step's chunks.
    batched = spec["max_len"] if spec["connector"] == "ExampleConnector" else None
    llm = LLM(
        model=spec["model"], skip_tokenizer_init=True, dtype="bfloat16", enforce_eager=True,
        kv_transfer_config=ktc, max_model_len=spec["max_len"], max_num_batched_tokens=batched,
        # vLLM's own prefix cache would answer Q's shared prefix before any connector is asked.
        enable_prefix_caching=False,
        # On CPU this is the share of host memory vLLM insists is free at start-up; the KV
        # cache itself is sized by VLLM_CPU_KVCACHE_SPACE (1 GiB here).
        gpu_memory_utilization=0.3,
    )
    sp = SamplingParams(max_tokens=1, detokenize=False, temperature=0)
    # One short request first: the engine's one-time start-up work is not a prefill's.
    llm.generate([TokensPrompt(prompt_token_ids=list(range(1, 33)))], sp, use_tqdm=False)
    return llm


def engine(spec: dict) -> dict:
    """Runs in a fresh process: one vLLM engine, the named prompts in order, timed."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    llm = make_llm(spec)
    sp = SamplingParams(max_tokens=1, detokenize=False, temperature=0)
    all_prompts = prompts(spec["tokens"])
    out: dict[str, dict] = {}
    # A prompt named again loads (or recomputes) again: vLLM's own prefix cache is off.
    for name in spec["prompts"]:
        t0 = time.perf_counter()
        res = llm.generate([TokensPrompt(prompt_token_ids=all_prompts[name])], sp, use_tqdm=False)
        dt = time.perf_counter() - t0
        r = out.setdefault(name, {"tokens": [], "seconds": [], "cached_tokens": []})
        r["tokens"].append(list(res[0].outputs[0].token_ids))
        r["seconds"].append(dt)
        r["cached_tokens"].append(res[0].num_cached_tokens)
    if "await_stored" in spec:
        # Saves end after the answer (save_async): the next engine must find them in memkv.
        t0 = time.perf_counter()
        admin, want = spec["await_stored"]
        while stored_bytes(admin) < want and time.perf_counter() - t0 < 30:
            time.sleep(0.01)
        out["_saves_settled_s"] = time.perf_counter() - t0
    return out


def run_engine(label: str, spec: dict, log_dir: Path, timeout: float) -> dict:
    """Starts ``engine(spec)`` in a fresh interpreter; its log goes to log_dir/label.log."""
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH", "")) if p)
    log = log_dir / f"{label}.log"
    out = log_dir / f"{label}.json"
    t0 = time.perf_counter()
    with open(log, "w") as f:
        # vLLM logs to stdout and stderr; the result comes back in a file.
        # Its own process group: vLLM's engine-core and worker children go with it.
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--engine", json.dumps(spec),
             "--json", str(out)],
            stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    text = log.read_text()
    if not out.exists():
        raise RuntimeError(f"{label}: vLLM gave no result within {timeout:.0f} s; log {log}:\n{text[-4000:]}")
    if proc.returncode != 0:
        raise RuntimeError(f"{label}: vLLM exited with {proc.returncode}; log {log}:\n{text[-4000:]}")
    result = json.loads(out.read_text())
    loads = [tuple(map(int, m)) for m in re.findall(r"memkv_vllm: loaded (\d+) of (\d+) chunks", text)]
    background = len(re.findall(r"memkv_vllm: loaded \d+ of \d+ chunks .* in the background", text))
    saves = [int(m) for m in re.findall(r"memkv_vllm: saved (\d+) chunks", text)]
    result["_memkv"] = {"loads": loads, "background_loads": background, "saved_chunks": sum(saves)}
    result["_wall_s"] = time.perf_counter() - t0
    print(f"  {label:8s} done in {result['_wall_s']:.0f} s: "
          + ", ".join(f"{k} tokens {v['tokens']} in " + " ".join(f"{t:.3f}" for t in v["seconds"]) + " s"
                      for k, v in result.items() if not k.startswith("_") and isinstance(v, dict)),
          flush=True)
    return result


def stored_bytes(admin: str) -> int:
    with urllib.request.urlopen(f"http://{admin}/v1/status", timeout=5) as r:
        return int(json.load(r)["storage"]["used_bytes_total"])


def bytes_served(admin: str) -> int:
    """The server's memkv_bytes_out_total (all transports) from its Prometheus metrics."""
    with urllib.request.urlopen(f"http://{admin}/v1/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(int(float(m)) for m in re.findall(r"^memkv_bytes_out_total(?:\{[^}]*\})? (\S+)$", text, re.M))


# ---------------------------------------------------------------------------- the scenario


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=4000, help="prompt length (default 4000)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--repeat", type=int, default=3, help="times memkv-B, files-B and down serve P (default 3)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per vLLM process")
    ap.add_argument("--no-files", action="store_true",
                    help="skip the ExampleConnector comparison (files-A/B): the test suite's run")
    ap.add_argument("--engine", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.engine:
        spec = json.loads(args.engine)
        run = engine
        if "entry" in spec:  # another script's engine (load_overlap.py), run the same way
            module, name = spec["entry"].split(":")
            run = getattr(__import__(module), name)
        args.json.write_text(json.dumps(run(spec)))
        return 0

    from memkv.testing import MemkvServer

    n = args.tokens
    p_chunks = (n - 1) // BLOCK
    q_shared = (n // 2) // BLOCK
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="memkv-vllm-e2e-") as tmp:
        work = Path(tmp)
        model = work / "model"
        make_model(model)
        files = work / "files"
        files.mkdir()
        base = {"model": str(model), "tokens": n, "max_len": max(8192, n + 256)}
        print(f"memkv-vllm e2e: {n}-token prompts, logs in {work} (removed at exit)", flush=True)
        with MemkvServer(max_size="1 GiB") as srv:
            # A's first save starts mapping the server's 1 GiB arena (2-4 s on a loaded two-core
            # machine beside vLLM) and goes over TCP meanwhile: a save no longer waits for it.
            memkv_extra = {"servers": [srv.address], "auth_key": srv.auth_key, "timeout_ms": 3000}
            mk = dict(base, connector="MemkvConnector", module="memkv_vllm.connector", extra=memkv_extra)
            ex = dict(base, connector="ExampleConnector", extra={"shared_storage_path": str(files)})
            r = {}
            # A computes P once (and saves it); B, files-B and down serve it `repeat` times, each
            # time loading again (or recomputing), and the median is reported. Q goes once, last:
            # its first pass saves its own tail, so a second pass would load all of it.
            ps = ["P"] * args.repeat
            page = 4 * 128 * 128 * 2  # bytes of one block of one layer: 4 KV heads x 128 tokens x K|V x bf16
            a_spec = dict(mk, prompts=["P"], await_stored=[srv.admin, p_chunks * 4 * page])
            r["memkv-A"] = run_engine("memkv-A", a_spec, work, args.timeout)
            after_a = stored_bytes(srv.admin)
            served_before_b = bytes_served(srv.admin)
            r["memkv-B"] = run_engine("memkv-B", dict(mk, prompts=ps + ["Q"]), work, args.timeout)
            served_to_b = bytes_served(srv.admin) - served_before_b
            if not args.no_files:
                r["files-A"] = run_engine("files-A", dict(ex, prompts=["P"]), work, args.timeout)
                r["files-B"] = run_engine("files-B", dict(ex, prompts=ps), work, args.timeout)
            evict = dict(mk, connector="EvictingMemkvConnector", module="tests.faults", prompts=["P"])
            r["evict"] = run_engine("evict", evict, work, args.timeout)
            srv.stop()
            r["down"] = run_engine("down", dict(mk, prompts=ps + ["Q"]), work, args.timeout)

    med = {k: statistics.median(v["P"]["seconds"]) for k, v in r.items()}
    recompute = med["down"]  # the same connector, nothing to load: plain recomputation
    summary = {
        "tokens": n,
        "prefill_s_median": med,
        "prefill_s_all": {k: v["P"]["seconds"] for k, v in r.items()},
        "memkv_vs_recompute": recompute / med["memkv-B"],
        "files_vs_recompute": recompute / med["files-B"] if "files-B" in med else None,
        "memkv_vs_files": med["files-B"] / med["memkv-B"] if "files-B" in med else None,
        "q_prefill_s_median": {"memkv-B (half loaded)": statistics.median(r["memkv-B"]["Q"]["seconds"]),
                               "down (recomputed)": statistics.median(r["down"]["Q"]["seconds"])},
        "stored_bytes_after_A": after_a,
        "a_saves_settled_after_answer_s": r["memkv-A"]["_saves_settled_s"],
        "server_bytes_out_during_B": served_to_b,
        "b_loads": r["memkv-B"]["_memkv"]["loads"],
        "evict_loads": r["evict"]["_memkv"]["loads"],
        "wall_s": time.perf_counter() - t_start,
    }
    failures = check(r, summary, p_chunks, q_shared, page, args.repeat)
    print(json.dumps(summary, indent=1))
    files = (f"from ExampleConnector files {med['files-B']:.3f} s ({summary['files_vs_recompute']:.1f}x); "
             f"memkv vs files {summary['memkv_vs_files']:.2f}x; " if "files-B" in med else "")
    print(f"prefill of {n} tokens (median of {args.repeat}): recomputed {recompute:.3f} s, loaded "
          f"from memkv {med['memkv-B']:.3f} s ({summary['memkv_vs_recompute']:.1f}x faster), "
          f"{files}A (compute + save to memkv) {med['memkv-A']:.3f} s")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "runs": r}, indent=1))
    for f in failures:
        print("FAIL:", f)
    print("e2e:", "FAILED" if failures else "OK", f"({summary['wall_s']:.0f} s)")
    return 1 if failures else 0


def check(r: dict, s: dict, p_chunks: int, q_shared: int, page: int, reps: int) -> list[str]:
    """Correctness only: the same greedy tokens everywhere, and B's KV really came from memkv."""
    bad = []
    want = {name: r["down"][name]["tokens"][0] for name in ("P", "Q")}  # the server was gone
    for label, runs in r.items():
        for name, v in runs.items():
            if name.startswith("_"):
                continue
            if any(t != want[name] for t in v["tokens"]):
                bad.append(f"{label}: {name} answered {v['tokens']}, recomputed {want[name]}")
    if r["memkv-A"]["_memkv"]["saved_chunks"] < p_chunks:
        bad.append(f"memkv-A saved {r['memkv-A']['_memkv']['saved_chunks']} chunks, want >= {p_chunks}")
    if s["stored_bytes_after_A"] < p_chunks * 4 * page:
        bad.append(f"server holds {s['stored_bytes_after_A']} bytes after A, want >= {p_chunks * 4 * page}")
    want_out = (reps * p_chunks + q_shared) * 4 * page
    if s["server_bytes_out_during_B"] < want_out:
        bad.append(f"the server sent {s['server_bytes_out_during_B']} bytes during B, want >= {want_out}")
    want_loads = [(p_chunks, p_chunks)] * reps + [(q_shared, q_shared)]
    if s["b_loads"] != want_loads:
        bad.append(f"memkv-B loads (loaded, planned) {s['b_loads']}, want {want_loads}")
    for label in ("memkv-B", "evict"):  # load_async is the default: vLLM's asynchronous path
        m = r[label]["_memkv"]
        if m["background_loads"] != len(m["loads"]):
            bad.append(f"{label}: {m['background_loads']} of {len(m['loads'])} loads in the background")
    if min(r["memkv-B"]["P"]["cached_tokens"]) < p_chunks * BLOCK:
        bad.append(f"memkv-B P: vLLM counted {r['memkv-B']['P']['cached_tokens']} cached tokens")
    ev = s["evict_loads"]
    if len(ev) != 1 or not 0 < ev[0][0] < ev[0][1]:
        bad.append(f"evict: loads {ev}, want one partial load (some chunks recomputed)")
    if r["down"]["_memkv"]["loads"]:
        bad.append(f"down: loads {r['down']['_memkv']['loads']} with the server stopped")
    return bad


if __name__ == "__main__":
    sys.exit(main())
