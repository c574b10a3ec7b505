#!/usr/bin/env python3
"""Proves the two images run (issue #15): the scorer image serves gRPC health, ListNodes and
/metrics from inside a container; the agent image, run with exactly the host mounts, user and
security settings of the chart's DaemonSet (read from the rendered manifest), streams this
machine's real load to it, and its CPU reading agrees with psutil's within 2 percentage
points while one core is kept busy. Also checks what the images must not have (a shell) and
what they must have (non-root user, OCI labels, size). Needs podman (Debian's, with runc),
grpcurl and psutil; the images come from deploy/images/build.sh.

Usage: tests/e2e/images.py [--manifest deploy/kustomize/loadstar.yaml] [--seconds 30]
"""
import argparse
import json
import multiprocessing
import os
import random
import subprocess
import sys
import threading
import time
import urllib.request

import psutil
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PODMAN = ["podman", "--runtime", "/usr/sbin/runc"]
# podman on this machine needs explicit limits (runc cannot raise them from the defaults).
ULIMITS = ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096"]
NETWORK = "loadstar-smoke"
SCORER = "loadstar-smoke-scorer"
AGENT = "loadstar-smoke-agent"
GPU_AGENT = "loadstar-smoke-gpu-agent"
MAX_IMAGE_BYTES = 40_000_000
CPU_TOLERANCE = 0.02
WINDOW = 10


def log(msg):
    print(f"[images] {msg}", file=sys.stderr, flush=True)


def fail(msg):
    log(f"FAIL: {msg}")
    for name in (SCORER, AGENT):
        out = subprocess.run(PODMAN + ["logs", "--tail", "20", name], capture_output=True, text=True)
        if out.stdout or out.stderr:
            log(f"--- last log lines of {name}:\n{out.stdout}{out.stderr}")
    sys.exit(1)


def run(args, check=True):
    out = subprocess.run(args, capture_output=True, text=True)
    if check and out.returncode != 0:
        fail(f"{' '.join(args)} exited {out.returncode}: {out.stderr.strip()}")
    return out


def workspace_version():
    meta = json.loads(run(["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"]).stdout)
    return next(p["version"] for p in meta["packages"] if p["name"] == "loadstar-scorer")


def manifest_objects(path):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    def one(kind):
        found = [d for d in docs if d["kind"] == kind]
        if len(found) != 1:
            fail(f"{path}: expected one {kind}, found {len(found)}")
        return found[0]
    return one("Deployment"), one("DaemonSet")


def security_flags(pod_spec, container):
    """podman flags for a pod's and container's securityContext, as the kubelet applies them."""
    flags = []
    psc = pod_spec.get("securityContext") or {}
    csc = container.get("securityContext") or {}
    user = csc.get("runAsUser", psc.get("runAsUser"))
    group = csc.get("runAsGroup", psc.get("runAsGroup"))
    if user is not None:
        flags += ["--user", f"{user}:{group if group is not None else user}"]
    if csc.get("readOnlyRootFilesystem"):
        flags.append("--read-only")
    for cap in (csc.get("capabilities") or {}).get("drop", []):
        flags += ["--cap-drop", cap]
    for cap in (csc.get("capabilities") or {}).get("add", []):
        flags += ["--cap-add", cap]
    if csc.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    if csc.get("privileged"):
        fail("a container asks for privileged mode; the chart must not")
    if pod_spec.get("hostNetwork"):
        flags += ["--network", "host"]
    if pod_spec.get("hostPID"):
        flags += ["--pid", "host"]
    return flags


def host_mounts(pod_spec, container):
    """-v flags for the container's hostPath mounts; other volumes (tokens) are listed."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    flags, skipped = [], []
    for m in container.get("volumeMounts", []):
        vol = volumes[m["name"]]
        if "hostPath" not in vol:
            skipped.append(m["name"])
            continue
        opts = ["ro" if m.get("readOnly") else "rw"]
        if m.get("mountPropagation") == "HostToContainer":
            opts.append("rslave")
        elif m.get("mountPropagation") == "Bidirectional":
            opts.append("rshared")
        flags += ["-v", f"{vol['hostPath']['path']}:{m['mountPath']}:{','.join(opts)}"]
    return flags, skipped


def image_checks(image, version, user):
    info = json.loads(run(PODMAN + ["image", "inspect", image]).stdout)[0]
    size = info["Size"]
    labels = info.get("Labels") or info["Config"].get("Labels") or {}
    log(f"{image}: {size / 1e6:.1f} MB uncompressed, user {info['Config'].get('User')}")
    if size > MAX_IMAGE_BYTES:
        fail(f"{image} is {size / 1e6:.1f} MB, above the {MAX_IMAGE_BYTES / 1e6:.0f} MB aim")
    if labels.get("org.opencontainers.image.version") != version:
        fail(f"{image}: label org.opencontainers.image.version={labels.get('org.opencontainers.image.version')!r}, workspace {version}")
    for key in ("title", "revision", "created", "licenses", "description"):
        if not labels.get(f"org.opencontainers.image.{key}"):
            fail(f"{image}: no org.opencontainers.image.{key} label")
    if info["Config"].get("User") != user:
        fail(f"{image}: user {info['Config'].get('User')!r}, want {user!r}")
    for shell in ("/bin/sh", "/bin/bash", "/usr/bin/dpkg", "/usr/bin/apt-get"):
        out = run(PODMAN + ["run", "--rm"] + ULIMITS + ["--entrypoint", shell, image, "--version"], check=False)
        if out.returncode == 0 or "no such file" not in (out.stderr + out.stdout).lower():
            fail(f"{image} has {shell} (exit {out.returncode}: {out.stderr.strip()[:200]})")
    log(f"{image}: no shell or package manager; OCI labels present (version {version})")


def port_of(container, port):
    out = run(PODMAN + ["port", container, f"{port}/tcp"]).stdout.strip().splitlines()[0]
    return out.rsplit(":", 1)[1]


def wait_for(what, check, timeout=30):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            ok, last = check()
            if ok:
                return last
        except Exception as e:  # noqa: BLE001 - reported below
            last = repr(e)
        time.sleep(0.3)
    fail(f"timed out waiting for {what}; last seen: {last}")


def http_get(url):
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def grpcurl(addr, method, body="{}"):
    out = run(["grpcurl", "-plaintext", "-d", body, addr, method], check=False)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip())
    return json.loads(out.stdout or "{}")


def burn(stop):
    while not stop.is_set():
        pass


def cpu_ratio(a, b):
    """psutil's busy fraction between two cpu_times snapshots (its cpu_percent formula)."""
    def total(t):
        d = t._asdict()
        return sum(d.values()) - d.get("guest", 0) - d.get("guest_nice", 0)
    def idle(t):
        return t.idle + getattr(t, "iowait", 0)
    dt = total(b) - total(a)
    return max(0.0, min(1.0, (dt - (idle(b) - idle(a))) / dt)) if dt > 0 else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--manifest", default=os.path.join(ROOT, "deploy/kustomize/loadstar.yaml"))
    ap.add_argument("--seconds", type=int, default=30, help="length of the CPU comparison")
    args = ap.parse_args()
    version = workspace_version()
    repo = os.environ.get("LOADSTAR_IMAGE_REPO", "docker.io/loadstar")
    scorer_image = f"{repo}/loadstar-scorer:{version}"
    agent_image = f"{repo}/loadstar-agent:{version}"
    deployment, daemonset = manifest_objects(args.manifest)

    image_checks(scorer_image, version, "65532:65532")
    image_checks(agent_image, version, "65534:65534")

    # Containers a killed earlier run left behind.
    for name in (SCORER, AGENT, GPU_AGENT):
        run(PODMAN + ["rm", "-f", "-t", "2", name], check=False)
    if run(PODMAN + ["network", "exists", NETWORK], check=False).returncode != 0:
        run(PODMAN + ["network", "create", NETWORK])
    try:
        check_scorer_and_agent(args, deployment, daemonset, scorer_image, agent_image)
    finally:
        for name in (AGENT, SCORER, GPU_AGENT):
            run(PODMAN + ["rm", "-f", "-t", "5", name], check=False)
    log("PASS")


def check_scorer_and_agent(args, deployment, daemonset, scorer_image, agent_image):
    # --- the scorer, with the Deployment's security settings, without Kubernetes ---------
    pod = deployment["spec"]["template"]["spec"]
    c = pod["containers"][0]
    flags = security_flags(pod, c)
    run(PODMAN + ["run", "-d", "--name", SCORER, "--network", NETWORK] + ULIMITS + flags +
        ["-p", "127.0.0.1::50051", "-p", "127.0.0.1::9090", scorer_image,
         "serve", "--kubernetes=off", "--insecure-allow-unauthenticated", "--log-format=json"])
    grpc = f"127.0.0.1:{port_of(SCORER, 50051)}"
    http = f"http://127.0.0.1:{port_of(SCORER, 9090)}"
    health = wait_for("gRPC health", lambda: (lambda r: (r.get("status") == "SERVING", r))(
        grpcurl(grpc, "grpc.health.v1.Health/Check")))
    log(f"scorer container ({' '.join(flags)}): gRPC health {health['status']}")
    code, body = http_get(f"{http}/readyz")
    if code != 200:
        fail(f"/readyz answered {code}: {body}")
    code, metrics = http_get(f"{http}/metrics")
    if code != 200 or "loadstar_scorer_reports_accepted_total" not in metrics:
        fail(f"/metrics answered {code} without loadstar_scorer_reports_accepted_total")
    log(f"scorer /readyz 200, /metrics {len(metrics.splitlines())} lines")
    logs = run(PODMAN + ["logs", SCORER]).stderr.strip().splitlines()
    try:
        json.loads(logs[-1])
    except (ValueError, IndexError):
        fail(f"--log-format=json did not write JSON lines: {logs[-1:]}")

    # --- the agent, as the DaemonSet runs it ------------------------------------------------
    pod = daemonset["spec"]["template"]["spec"]
    c = pod["containers"][0]
    flags = security_flags(pod, c)
    mounts, skipped = host_mounts(pod, c)
    node = f"smoke-{random.randrange(16**6):06x}"
    agent_args = []
    for a in c["args"]:
        # The scorer here is the container above; no token (authentication is off here, the
        # projected-token path is covered by the e2e_auth suite); a short window so that the
        # comparison below fills quickly.
        if a.startswith("--scorer=") or a.startswith("--token-file=") or a.startswith("--windows="):
            continue
        agent_args.append(a)
    agent_args += [f"--scorer=http://{SCORER}:50051", f"--windows={WINDOW}s,60s"]
    network = [] if pod.get("hostNetwork") else ["--network", NETWORK]
    run(PODMAN + ["run", "-d", "--name", AGENT] + network + ULIMITS + flags + mounts +
        ["-e", f"NODE_NAME={node}", "-p", "127.0.0.1::9910", agent_image] + agent_args)
    log(f"agent container: {' '.join(flags + mounts)} (not mounted here: {', '.join(skipped) or 'none'})")
    log(f"agent args: {' '.join(agent_args)}")
    agent_http = f"http://127.0.0.1:{port_of(AGENT, 9910)}"
    wait_for("agent /healthz", lambda: (http_get(f"{agent_http}/healthz")[0] == 200, http_get(f"{agent_http}/healthz")))

    def node_status():
        r = grpcurl(grpc, "loadstar.v1.Scorer/ListNodes")
        for n in r.get("nodes", []):
            if n.get("nodeName") == node and n.get("lastReport"):
                return n
        return None
    wait_for(f"node {node} in ListNodes", lambda: (node_status() is not None, grpcurl(grpc, "loadstar.v1.Scorer/ListNodes")))
    report = node_status()["lastReport"]
    errors = report.get("collectorErrors", [])
    if errors:
        fail(f"the agent container's collectors failed: {errors}")
    resources = sorted({u["resource"] for u in report.get("usage", [])})
    log(f"ListNodes shows {node}, streamed from the agent container: {', '.join(resources)}; "
        f"{len(report.get('nics', []))} NICs, {len(report.get('disks', []))} disks, no collector errors")

    # --- CPU: the agent's window mean against psutil over the same seconds ------------------
    stop = multiprocessing.Event()
    burner = multiprocessing.Process(target=burn, args=(stop,), daemon=True)
    burner.start()
    samples = []
    sampling = threading.Event()
    def sample():
        while not sampling.is_set():
            samples.append((time.time(), psutil.cpu_times()))
            time.sleep(0.1)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    seen = {}
    try:
        end = time.time() + WINDOW + 2 + args.seconds
        while time.time() < end:
            n = node_status()
            rep = n["lastReport"] if n else {}
            t = int(rep.get("sampleTimeUnixNanos", 0)) / 1e9
            for u in rep.get("usage", []):
                if u.get("resource") != "RESOURCE_CPU":
                    continue
                for w in u.get("windows", []):
                    if w.get("windowSeconds") == WINDOW and int(w.get("sampleCount", 0)) >= WINDOW:
                        seen[t] = w.get("meanRatio", 0.0)
            time.sleep(0.5)
    finally:
        sampling.set(); stop.set(); burner.join(5); sampler.join(5)

    def nearest(t):
        return min(samples, key=lambda s: abs(s[0] - t))
    rows = []
    for t, agent_cpu in sorted(seen.items()):
        a, b = nearest(t - WINDOW), nearest(t)
        if abs(a[0] - (t - WINDOW)) > 0.2 or abs(b[0] - t) > 0.2:
            continue
        rows.append((t, agent_cpu, cpu_ratio(a[1], b[1])))
    if len(rows) < args.seconds // 2:
        fail(f"only {len(rows)} comparable {WINDOW} s windows in {args.seconds} s")
    worst = max(abs(x - y) for _, x, y in rows)
    mean_agent = sum(r[1] for r in rows) / len(rows)
    mean_psutil = sum(r[2] for r in rows) / len(rows)
    log(f"CPU over {len(rows)} {WINDOW} s windows with one core busy: agent {mean_agent:.3f}, "
        f"psutil {mean_psutil:.3f}; largest difference {worst * 100:.2f} pp (allowed {CPU_TOLERANCE * 100:.0f})")
    if worst > CPU_TOLERANCE:
        for t, x, y in rows:
            log(f"  {t:.1f}: agent {x:.4f} psutil {y:.4f}")
        fail(f"agent CPU differs from psutil by {worst * 100:.2f} pp")
    check_gpu_library(agent_image, grpc)


def check_gpu_library(agent_image, grpc):
    """On a GPU node the NVIDIA container toolkit bind-mounts the driver's libnvidia-ml.so.1
    into the container's library directory; the agent dlopen()s it by that name. No GPU is
    available here, so the test fake NVML (tests/fixtures/fake-nvml) stands in for the
    driver's library, mounted where the toolkit mounts it."""
    import tempfile
    src = os.path.join(ROOT, "tests/fixtures/fake-nvml/fake_nvml.c")
    with tempfile.TemporaryDirectory(prefix="loadstar-fake-nvml-") as d:
        os.chmod(d, 0o755)
        lib = os.path.join(d, "libnvidia-ml.so.1")
        run(["cc", "-shared", "-fPIC", "-O1", "-o", lib, src])
        devices = os.path.join(d, "devices")
        with open(devices, "w") as f:
            f.write("GPU-00000000-1111-2222-3333-444444444444|NVIDIA A100-SXM4-40GB|"
                    "42949672960|10737418240|40|2|55|250000|ok\n")
        os.chmod(devices, 0o644)
        node = f"gpu-smoke-{random.randrange(16**6):06x}"
        run(PODMAN + ["run", "-d", "--name", GPU_AGENT, "--network", NETWORK] + ULIMITS +
            ["--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
             "-v", f"{lib}:/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1:ro",
             "-v", f"{devices}:/etc/fake-nvml/devices:ro",
             "-e", "FAKE_NVML_DEVICES=/etc/fake-nvml/devices", "-e", f"NODE_NAME={node}",
             agent_image, f"--scorer=http://{SCORER}:50051"])
        def gpus():
            for n in grpcurl(grpc, "loadstar.v1.Scorer/ListNodes").get("nodes", []):
                if n.get("nodeName") == node:
                    rep = n.get("lastReport", {})
                    return bool(rep.get("gpus")), rep
            return False, None
        rep = wait_for(f"{node}'s GPUs in ListNodes", gpus)
        usage = sorted(u.get("resource") for u in rep.get("usage", []))
        if "RESOURCE_GPU" not in usage or "RESOURCE_GPU_MEMORY" not in usage:
            fail(f"GPU devices reported but not their usage: {usage}")
        g = rep["gpus"][0]
        log(f"agent image with libnvidia-ml.so.1 mounted where the NVIDIA toolkit puts it: "
            f"{len(rep['gpus'])} GPU ({g.get('name') or g.get('uuid')}) loaded by dlopen; {', '.join(usage)}")

if __name__ == "__main__":
    main()
