#!/usr/bin/env python3
"""Renders packaging/k8s with the kustomize features it uses, and validates the result.

Only what these manifests need is implemented: Kustomization/Component files with
`resources` (files or directories), `components`, `namespace` and `patches` given as
strategic-merge patch files (maps merge, lists of maps merge by `name`, anything else is
replaced). Any other kustomization key is refused, so a manifest that needs real kustomize
fails here instead of being half-rendered. `kubectl apply -k` renders the same objects.

  render.py DIR                    print the rendered objects of DIR as YAML
  render.py --validate VER ROOT    render base and overlays under ROOT, validate them against
                                   Kubernetes VER's schemas and check the fleet's settings
"""
import copy
import os
import sys

import yaml

KNOWN_KEYS = {"apiVersion", "kind", "namespace", "resources", "components", "patches"}
CLUSTER_SCOPED = {"Namespace"}


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def kustomization(dirpath):
    path = os.path.join(dirpath, "kustomization.yaml")
    if not os.path.exists(path):
        raise SystemExit(f"{dirpath}: no kustomization.yaml")
    (k,) = load_all(path)
    unknown = set(k) - KNOWN_KEYS
    if unknown:
        raise SystemExit(f"{path}: keys this renderer does not implement: {sorted(unknown)}")
    return path, k


def merge(base, patch):
    """Strategic merge, the subset used here: maps merge, lists of named maps merge by name."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    if (isinstance(base, list) and isinstance(patch, list)
            and all(isinstance(x, dict) and "name" in x for x in base + patch)):
        out = [copy.deepcopy(x) for x in base]
        for item in patch:
            for i, existing in enumerate(out):
                if existing["name"] == item["name"]:
                    out[i] = merge(existing, item)
                    break
            else:
                out.append(copy.deepcopy(item))
        return out
    return copy.deepcopy(patch)


def apply_patches(objects, k, dirpath, path):
    for p in k.get("patches", []):
        if set(p) != {"path"}:
            raise SystemExit(f"{path}: only `patches: - path: FILE` is implemented, got {p}")
        for patch in load_all(os.path.join(dirpath, p["path"])):
            targets = [o for o in objects if o["kind"] == patch["kind"]
                       and o["metadata"]["name"] == patch["metadata"]["name"]]
            if len(targets) != 1:
                raise SystemExit(f"{dirpath}/{p['path']}: patch target {patch['kind']}/"
                                 f"{patch['metadata']['name']} matched {len(targets)} objects")
            i = objects.index(targets[0])
            objects[i] = merge(objects[i], patch)


def render(dirpath):
    path, k = kustomization(dirpath)
    if k.get("kind") != "Kustomization":
        raise SystemExit(f"{path}: kind {k.get('kind')}, expected Kustomization")
    objects = []
    for r in k.get("resources", []):
        rp = os.path.normpath(os.path.join(dirpath, r))
        objects += render(rp) if os.path.isdir(rp) else load_all(rp)
    for c in k.get("components", []):
        cdir = os.path.normpath(os.path.join(dirpath, c))
        cpath, comp = kustomization(cdir)
        if comp.get("kind") != "Component" or comp.get("resources") or comp.get("components"):
            raise SystemExit(f"{cpath}: expected a Component with patches only")
        apply_patches(objects, comp, cdir, cpath)
    apply_patches(objects, k, dirpath, path)
    if "namespace" in k:
        for o in objects:
            if o["kind"] not in CLUSTER_SCOPED:
                o["metadata"]["namespace"] = k["namespace"]
    return objects


def fleet_checks(objects, root, label):
    """What the fleet relies on, beyond schema validity. Returns a list of problems."""
    problems = []
    by_kind = {}
    for o in objects:
        by_kind.setdefault(o["kind"], []).append(o)
    (sts,) = by_kind.get("StatefulSet", [None])
    (svc,) = by_kind.get("Service", [None])
    (cm,) = by_kind.get("ConfigMap", [None])
    if not sts or not svc or not cm:
        return [f"{label}: expected one StatefulSet, one Service and one ConfigMap"]
    pod = sts["spec"]["template"]["spec"]
    (c,) = pod["containers"]

    def need(ok, what):
        if not ok:
            problems.append(f"{label}: {what}")

    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    need(ports == {"data": 9900, "admin": 9901}, f"container ports {ports}, expected data 9900, admin 9901")
    for probe, want in (("livenessProbe", "/v1/health"), ("readinessProbe", "/v1/ready"),
                        ("startupProbe", "/v1/ready")):
        get = c.get(probe, {}).get("httpGet", {})
        need(get.get("path") == want and ports.get(get.get("port"), get.get("port")) == 9901,
             f"{probe} should GET {want} on 9901, has {get}")
    with open(os.path.join(root, "..", "deb", "memkv.service")) as f:
        stop = [int(line.split("=", 1)[1]) for line in f if line.startswith("TimeoutStopSec=")]
    need(pod.get("terminationGracePeriodSeconds") == stop[0],
         f"terminationGracePeriodSeconds {pod.get('terminationGracePeriodSeconds')} != the unit's TimeoutStopSec {stop[0]}")
    need("IPC_LOCK" in c["securityContext"]["capabilities"]["add"], "IPC_LOCK not added")
    limits = c["resources"]["limits"]
    need(any(k.startswith("hugepages-") for k in limits), "no hugepages limit")
    need(sts["spec"]["serviceName"] == svc["metadata"]["name"] and svc["spec"].get("clusterIP") == "None",
         "the StatefulSet's serviceName is not a headless Service")
    anti = pod.get("affinity", {}).get("podAntiAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", [])
    need(any(t.get("topologyKey") == "kubernetes.io/hostname" for t in anti), "no one-server-per-node anti-affinity")
    secrets = [v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v]
    need(secrets == ["memkv-auth"], f"auth key Secret volume: {secrets}")
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    need(env.get("MEMKV_AUTH_KEY_FILE", "").startswith(mounts.get("auth-key", "?") + "/"),
         "MEMKV_AUTH_KEY_FILE does not point into the Secret's mount")
    need(mounts.get("config") == "/etc/memkv/config.yaml", "config.yaml not mounted at /etc/memkv/config.yaml")
    # The ConfigMap's config.yaml: YAML, only keys the server knows (those of its example).
    with open(os.path.join(root, "..", "..", "crates", "memkv-server", "config.example.yaml")) as f:
        example = yaml.safe_load(f)
    config = yaml.safe_load(cm["data"]["config.yaml"])
    for section, values in config.items():
        if section not in example:
            problems.append(f"{label}: config.yaml: unknown section {section}")
            continue
        for key in values or {}:
            if key not in example[section]:
                problems.append(f"{label}: config.yaml: unknown key {section}.{key}")
    need("auth_key" not in config.get("network", {}), "the ConfigMap carries an auth key")
    need(config["network"]["address"].startswith("0.0.0.0:9900"), "network.address is not 0.0.0.0:9900")
    return problems, c, pod, config


def main():
    if sys.argv[1] != "--validate":
        yaml.safe_dump_all(render(sys.argv[1]), sys.stdout, sort_keys=False)
        return
    import kubernetes_validate

    version, root = sys.argv[2], sys.argv[3]
    from importlib.metadata import version as dist_version

    print(f"k8s-check: kubernetes-validate {dist_version('kubernetes-validate')}, schemas of "
          f"Kubernetes {version}, strict (unknown fields fail)", file=sys.stderr)
    failures = 0
    targets = [("base", os.path.join(root, "base"))]
    overlays = os.path.join(root, "overlays")
    targets += [(f"overlays/{d}", os.path.join(overlays, d)) for d in sorted(os.listdir(overlays))]
    results = {}
    for label, d in targets:
        objects = render(d)
        for o in objects:
            name = f"{label}: {o['kind']}/{o['metadata']['name']}"
            try:
                kubernetes_validate.validate(o, version, strict=True)
                print(f"k8s-check:   ok: {name} valid", file=sys.stderr)
            except Exception as e:  # ValidationError, SchemaNotFoundError, ...
                print(f"k8s-check:   FAIL: {name}: {e}", file=sys.stderr)
                failures += 1
        problems, c, pod, config = fleet_checks(objects, root, label)
        for p in problems:
            print(f"k8s-check:   FAIL: {p}", file=sys.stderr)
        failures += len(problems)
        if not problems:
            print(f"k8s-check:   ok: {label}: probes, drain {pod['terminationGracePeriodSeconds']} s, IPC_LOCK, "
                  f"hugepages, Secret, one server per node, config keys", file=sys.stderr)
        results[label] = (c, pod, config)
    # The production overlay really carries the components' settings.
    c, pod, config = results["overlays/rdma-host-network"]
    rdma = [k for k in c["resources"]["limits"] if k not in ("cpu", "memory") and not k.startswith("hugepages-")]
    checks = [
        (pod.get("hostNetwork") is True and pod.get("dnsPolicy") == "ClusterFirstWithHostNet",
         "host networking with ClusterFirstWithHostNet"),
        (bool(rdma) and all(c["resources"]["requests"].get(k) == c["resources"]["limits"][k] for k in rdma),
         f"RDMA device resource {rdma} requested and limited"),
        (config["rdma"]["enabled"] is True, "rdma.enabled true in its config.yaml"),
        (results["base"][1].get("hostNetwork") is None and results["base"][2]["rdma"]["enabled"] is False,
         "the base stays TCP-only without host networking"),
    ]
    for ok, what in checks:
        print(f"k8s-check:   {'ok' if ok else 'FAIL'}: overlays/rdma-host-network: {what}", file=sys.stderr)
        failures += not ok
    for f in sorted(os.listdir(os.path.join(root, "examples"))):
        for o in load_all(os.path.join(root, "examples", f)):
            name = f"examples/{f}: {o['kind']}/{o['metadata']['name']}"
            try:
                kubernetes_validate.validate(o, version, strict=True)
                print(f"k8s-check:   ok: {name} valid", file=sys.stderr)
            except Exception as e:
                print(f"k8s-check:   FAIL: {name}: {e}", file=sys.stderr)
                failures += 1
    # The validator must refuse what the cluster would: a misspelt field, a wrong type.
    sts = next(o for o in render(os.path.join(root, "base")) if o["kind"] == "StatefulSet")
    broken = [copy.deepcopy(sts), copy.deepcopy(sts)]
    broken[0]["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    broken[1]["spec"]["replicas"] = "three"
    for what, o in zip(("a misspelt field (livenessProbes)", "a string for replicas"), broken):
        try:
            kubernetes_validate.validate(o, version, strict=True)
            print(f"k8s-check:   FAIL: the validator accepted {what}", file=sys.stderr)
            failures += 1
        except kubernetes_validate.ValidationError:
            print(f"k8s-check:   ok: the validator refuses {what}", file=sys.stderr)
    if failures:
        raise SystemExit(f"k8s-check: error: {failures} failure(s)")
    print(f"k8s-check: PASS: every object validates against Kubernetes {version}", file=sys.stderr)


if __name__ == "__main__":
    main()
