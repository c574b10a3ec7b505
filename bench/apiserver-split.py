#!/usr/bin/env python3
"""Splits a kube-apiserver CPU profile (Go's pprof, as bench/scheduler-throughput.sh takes it
during Loadstar's run with LOADSTAR_BENCH_APISERVER_PPROF) into what a scheduler's run makes
the API server do: the bindings' storage work, the other create work (in that run, the
scheduler's Events and the bindings' decoding and reply), watches served, request filters,
garbage collection, HTTP/2 and TLS below the handlers, etc. Each sample counts once,
in the first category (in the order listed) whose marker is in its stack. Needs `go`: its
`go tool pprof -traces` reads the profile. Usage: apiserver-split.py PROFILE [PROFILE...]"""
import collections
import re
import subprocess
import sys

# Go records at most this many frames of a stack and drops the outermost: a stack this deep
# may have lost the frames that name its request.
MAX_FRAMES = 64
CUT = f"stacks cut at Go's {MAX_FRAMES} frames, request not named"

# (category, markers): a sample goes to the first category one of whose markers is a
# substring of a frame of its stack. A binding is a create too: only its storage work is
# told apart (`BindingREST`); its decoding, admission and reply count with the other creates.
CATEGORIES = [
    ("bindings (their storage work)", ["storage.(*BindingREST)"]),
    ("other creates (Events; bindings' decoding, admission, reply)", ["handlers.createHandler"]),
    ("watches served", ["handlers.serveWatch"]),
    ("patches and updates", ["handlers.PatchResource", "handlers.UpdateResource"]),
    ("reads (get, list)", ["handlers.GetResource", "handlers.ListResource", "handlers.getResourceHandler"]),
    (CUT, []),
    ("request filters outside a handler (authn, fairness, routing)", ["filters.WithAuthentication"]),
    ("watch cache and etcd client", ["cacher.", "etcd3.", "clientv3", "grpc/internal/transport"]),
    ("garbage collection (background)", ["runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge"]),
    ("HTTP/2 and TLS below the handlers", ["x/net/http2.", "crypto/tls.", "net/http."]),
]
OTHER = "other (scheduling of goroutines, timers, controllers)"


SAMPLE = re.compile(r"\s*([\d.]+)(ns|us|µs|ms|s)\s+(.*)")


def traces(path):
    """(seconds, frames) per distinct stack of the profile at `path`."""
    try:
        run = subprocess.run(["go", "tool", "pprof", "-traces", path],
                             capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit("apiserver-split.py needs the `go` command (for `go tool pprof`)")
    if run.returncode != 0:
        sys.exit(f"{path}: not a profile `go tool pprof` reads: {run.stderr.strip()}")
    out = run.stdout
    for block in out.split("-----------+-------------------------------------------------------"):
        lines = [l for l in block.strip().splitlines() if l.strip()]
        if not lines:
            continue
        # Label lines (`key:value`) may come first; the sample's line starts with its time.
        at = next((i for i, l in enumerate(lines) if SAMPLE.match(l)), None)
        if at is None:
            continue
        m = SAMPLE.match(lines[at])
        scale = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]
        frames = [m.group(3)] + [l.strip() for l in lines[at + 1:]]
        yield float(m.group(1)) * scale, frames


def split(path):
    seconds = collections.Counter()
    for s, frames in traces(path):
        stack = "\n".join(frames)
        cut = len(frames) >= MAX_FRAMES
        name = next((c for c, marks in CATEGORIES
                     if any(k in stack for k in marks) or (c == CUT and cut)), OTHER)
        seconds[name] += s
    return seconds


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: apiserver-split.py PROFILE [PROFILE...]")
    for path in sys.argv[1:]:
        seconds = split(path)
        total = sum(seconds.values())
        print(f"{path}: {total:.2f} s of API server CPU sampled")
        for name in [c for c, _ in CATEGORIES] + [OTHER]:
            share = seconds[name] / total * 100 if total else 0.0
            print(f"  {share:5.1f} %  {name}")


if __name__ == "__main__":
    main()
