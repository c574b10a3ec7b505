#!/usr/bin/env python3
"""Releases the network the e2e node's pods got from CNI when their sandboxes were never torn down.

`node_down` stops the kubelet and then kills the pods' containers through containerd, so
containerd's CRI never runs CNI DEL for them. Without this, every e2e run left behind each
pod's network namespace, its bridge plugin's NAT chain (`CNI-…` in POSTROUTING) and its
host-local address lease: after a few runs on one machine the node's /24 runs out of
addresses and new pods fail with "no IP addresses available".

This does what containerd would have done, from libcni's own cache
(/var/lib/cni/results, one file per attachment: the network list it was added with, the
container, the interface, the CNI_ARGS and the ADD result): DEL through the list's plugins in
reverse order, with the cached result as `prevResult`, then the network namespace is
deleted and the cache entry removed. Only attachments to NETWORK (the e2e conflist's name)
are released, and containerd's built-in loopback attachments (`cni-loopback`) of the same
sandboxes. Then any NAT rule and chain the bridge plugin tagged with NETWORK that is still
there is removed: run this only while no sandbox of NETWORK is running (node_down after
containerd has stopped, node_up before it starts). A failed step is reported and the rest go
on; the exit status is 1 if any failed.

Usage: cni-release.py [--network loadstar-e2e] [--cni-path /usr/lib/cni]
                      [--cache /var/lib/cni/results]
"""
import argparse
import base64
import binascii
import json
import os
import shlex
import subprocess
import sys

LOOPBACK_NETWORK = "cni-loopback"


def load(path):
    """The cache entry at `path`, or None (with a message) if it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            entry = json.load(f)
        entry["_config"] = json.loads(base64.b64decode(entry["config"]))
        return entry
    except (OSError, ValueError, KeyError, TypeError, binascii.Error) as e:
        print(f"cni-release: skipping {path}: not a libcni cache entry ({e})", file=sys.stderr)
        return None


def netns_of(entry):
    """The network namespace path the ADD result names, if any."""
    for iface in (entry.get("result") or {}).get("interfaces") or []:
        if iface.get("sandbox"):
            return iface["sandbox"]
    return ""


def delete(entry, cni_path):
    """Runs DEL through the entry's plugins, last first. Returns the errors."""
    conf = entry["_config"]
    plugins = conf.get("plugins") or [conf]
    netns = netns_of(entry)
    env = dict(
        os.environ,
        CNI_COMMAND="DEL",
        CNI_CONTAINERID=entry["containerId"],
        CNI_NETNS=netns if os.path.exists(netns) else "",
        CNI_IFNAME=entry.get("ifName", "eth0"),
        CNI_PATH=cni_path,
        CNI_ARGS=";".join(f"{k}={v}" for k, v in entry.get("cniArgs") or []),
    )
    errors = []
    for plugin in reversed(plugins):
        stdin = dict(plugin, name=conf["name"], cniVersion=conf.get("cniVersion", "0.4.0"))
        if entry.get("result"):
            stdin["prevResult"] = entry["result"]
        binary = os.path.join(cni_path, plugin.get("type", ""))
        try:
            done = subprocess.run([binary], input=json.dumps(stdin).encode(), env=env,
                                  capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            errors.append(f"{plugin.get('type')}: {e}")
            continue
        if done.returncode != 0:
            out = (done.stdout or done.stderr).decode(errors="replace").strip()
            errors.append(f"{plugin.get('type')}: exit {done.returncode}: {out[:300]}")
    return errors


def sweep_masquerade(network):
    """Deletes the bridge plugin's NAT rules and chains still tagged with `network`.

    The bridge plugin's DEL removes them only when it finds the pod's interface in its
    namespace, and entries whose cache is gone (runs before this script existed) get no DEL
    at all. Debian's bridge plugin left them after DEL even with the namespace in place in
    the runs checked (2026-11-29), so they are swept whatever DEL did. Called when no sandbox of `network` can be running, so every
    such rule is stale. Returns (rules deleted, errors)."""
    tag = f'name: "{network}" id: '
    try:
        listing = subprocess.run(["iptables", "-w", "-t", "nat", "-S", "POSTROUTING"],
                                 capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        return 0, [f"listing the nat table: {e}"]
    deleted, errors = 0, []
    for line in listing.splitlines():
        args = shlex.split(line)
        if args[:2] != ["-A", "POSTROUTING"] or not any(a.startswith(tag) for a in args):
            continue
        chain = args[args.index("-j") + 1] if "-j" in args[:-1] else ""
        steps = [["-D", *args[1:]]]
        if chain.startswith("CNI-"):
            steps += [["-F", chain], ["-X", chain]]
        for step in steps:
            done = subprocess.run(["iptables", "-w", "-t", "nat", *step],
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                errors.append(f"iptables -t nat {' '.join(step[:2])}: {done.stderr.strip()}")
                break
        else:
            deleted += 1
    return deleted, errors


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--network", default="loadstar-e2e")
    p.add_argument("--cni-path", default="/usr/lib/cni")
    p.add_argument("--cache", default="/var/lib/cni/results")
    a = p.parse_args()
    if not os.path.isdir(a.cache):
        return 0
    entries = []
    for name in sorted(os.listdir(a.cache)):
        entry = load(os.path.join(a.cache, name))
        if entry is not None:
            entries.append((os.path.join(a.cache, name), entry))
    ours = {e["containerId"] for _, e in entries if e.get("networkName") == a.network}
    released = failed = 0
    for path, entry in entries:
        network = entry.get("networkName")
        if not (network == a.network or (network == LOOPBACK_NETWORK and entry["containerId"] in ours)):
            continue
        errors = delete(entry, a.cni_path)
        if errors:
            failed += 1
            print(f"cni-release: {network} {entry['containerId'][:12]}: " + "; ".join(errors),
                  file=sys.stderr)
            continue
        netns = netns_of(entry)
        if netns.startswith("/var/run/netns/") or netns.startswith("/run/netns/"):
            subprocess.run(["ip", "netns", "delete", os.path.basename(netns)],
                           capture_output=True, check=False)
        os.remove(path)
        released += 1
    swept, errors = sweep_masquerade(a.network)
    for e in errors:
        print(f"cni-release: {e}", file=sys.stderr)
    if released or failed or swept:
        print(f"cni-release: released {released} attachment(s) of {a.network} sandboxes"
              + (f", {failed} failed" if failed else "")
              + (f"; removed {swept} stale NAT rule(s) and chain(s)" if swept else ""),
              file=sys.stderr)
    return 1 if failed or errors else 0


if __name__ == "__main__":
    sys.exit(main())
