#!/usr/bin/env python3
"""Releases the network the e2e node's pods got from CNI when their sandboxes were never torn down.

`node_down` stops the kubelet and then kills the pods' containers through containerd, so
containerd's CRI never runs CNI DEL for them. Without this, every e2e run left behind each
pod's network namespace, its bridge plugin's NAT chain (`CNI-…` in POSTROUTING) and its
host-local address lease: after a few runs on one machine the node's /24 runs out of
addresses and new pods fail with "no IP addresses available".

This does what containerd's StopPodSandbox would have done, from libcni's own cache
(/var/lib/cni/results, one file per attachment: the network list it was added with, the
container, the interface, the CNI_ARGS, the capability arguments and the ADD result): for
each sandbox, DEL of every attachment through its list's plugins in reverse order (with
`runtimeConfig` for the capabilities a plugin declares, and the cached result as
`prevResult` from CNI 0.4.0 on, as libcni sends them), and only then, if all of them
succeeded, the network namespace is deleted and the cache entries removed. Only sandboxes
attached to NETWORK (the e2e conflist's name) are released, with their containerd loopback
attachments (`cni-loopback`). Then any NAT rule and chain the bridge plugin tagged with
NETWORK that is still there (from runs before this script, whose cache is gone) is removed.

Run it only while no sandbox of NETWORK is running: node_down after containerd has stopped,
node_up before it starts (node.sh skips it when another e2e containerd is up). A failed step
is reported and the rest go on; the exit status is 1 if any failed.

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


def warn(message):
    print(f"cni-release: {message}", file=sys.stderr)


def load(path):
    """The cache entry at `path`, or None (with a message) if it is not a usable one."""
    try:
        with open(path, encoding="utf-8") as f:
            entry = json.load(f)
        config = json.loads(base64.b64decode(entry["config"]))
        if not (isinstance(config, dict) and isinstance(entry.get("containerId"), str)
                and isinstance(entry.get("networkName"), str)):
            raise ValueError("no config object, containerId or networkName")
        entry["_config"] = config
        return entry
    except (OSError, ValueError, KeyError, TypeError, binascii.Error) as e:
        warn(f"skipping {path}: not a libcni cache entry ({e})")
        return None


def netns_of(entry):
    """The network namespace path the ADD result names, if any."""
    result = entry.get("result")
    for iface in (result.get("interfaces") if isinstance(result, dict) else None) or []:
        if isinstance(iface, dict) and iface.get("sandbox"):
            return iface["sandbox"]
    return ""


def version_at_least(version, floor):
    """Whether CNI spec version string `version` is at least `floor` (tuples of ints)."""
    try:
        return tuple(int(p) for p in version.split(".")) >= floor
    except (AttributeError, ValueError):
        return False


def delete(entry, cni_path):
    """Runs DEL through the entry's plugins, last first. Returns the errors."""
    conf = entry["_config"]
    plugins = conf.get("plugins") or [conf]
    version = conf.get("cniVersion", "0.4.0")
    netns = netns_of(entry)
    env = dict(
        os.environ,
        CNI_COMMAND="DEL",
        CNI_CONTAINERID=entry["containerId"],
        CNI_NETNS=netns if netns and os.path.exists(netns) else "",
        CNI_IFNAME=entry.get("ifName") or "eth0",
        CNI_PATH=cni_path,
        CNI_ARGS=";".join(f"{k}={v}" for k, v in entry.get("cniArgs") or []),
    )
    capability_args = entry.get("capabilityArgs") or {}
    errors = []
    for plugin in reversed(plugins):
        stdin = dict(plugin, name=conf.get("name", ""), cniVersion=version)
        runtime = {k: v for k, v in capability_args.items()
                   if (plugin.get("capabilities") or {}).get(k)}
        if runtime:
            stdin["runtimeConfig"] = runtime
        if entry.get("result") and version_at_least(version, (0, 4, 0)):
            stdin["prevResult"] = entry["result"]
        binary = os.path.join(cni_path, str(plugin.get("type", "")))
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


def release_sandbox(container, attachments, cni_path):
    """DEL of every attachment of one sandbox, then its namespace and cache entries.
    Returns (attachments released, errors)."""
    errors = []
    for _, entry in attachments:
        errors += [f"{entry['networkName']} {container[:12]}: {e}"
                   for e in delete(entry, cni_path)]
    if errors:
        return 0, errors  # the namespace and cache stay for a later try
    netns = next(filter(None, (netns_of(e) for _, e in attachments)), "")
    if os.path.dirname(netns) in ("/var/run/netns", "/run/netns"):
        done = subprocess.run(["ip", "netns", "delete", os.path.basename(netns)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0 and os.path.exists(netns):
            errors.append(f"ip netns delete {os.path.basename(netns)}: {done.stderr.strip()}")
    for path, _ in attachments:
        try:
            os.remove(path)
        except OSError as e:
            errors.append(f"removing {path}: {e}")
    return len(attachments), errors


def sweep_masquerade(network):
    """Deletes the bridge plugin's NAT rules and chains still tagged with `network`.

    The bridge plugin removes them on DEL only when it finds the pod's interface in its
    namespace, and attachments whose cache is gone (runs before this script existed) get no
    DEL at all. Called when no sandbox of `network` can be running, so every such rule is
    stale. Returns (rules deleted, errors)."""
    tag = f'name: "{network}" id: '
    try:
        listing = subprocess.run(["iptables", "-w", "-t", "nat", "-S", "POSTROUTING"],
                                 capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        return 0, [f"listing the nat table: {e}"]
    deleted, errors = 0, []
    for line in listing.splitlines():
        try:
            args = shlex.split(line)
        except ValueError as e:
            errors.append(f"unreadable rule {line[:100]!r}: {e}")
            continue
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
    p = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    p.add_argument("--network", default="loadstar-e2e")
    p.add_argument("--cni-path", default="/usr/lib/cni")
    p.add_argument("--cache", default="/var/lib/cni/results")
    a = p.parse_args()
    # Attachments by sandbox, for the sandboxes with an attachment to our network.
    sandboxes = {}
    names = sorted(os.listdir(a.cache)) if os.path.isdir(a.cache) else []
    for name in names:
        path = os.path.join(a.cache, name)
        entry = load(path)
        if entry is not None:
            sandboxes.setdefault(entry["containerId"], []).append((path, entry))
    released, errors = 0, []
    for container, attachments in sandboxes.items():
        networks = {e["networkName"] for _, e in attachments}
        if a.network not in networks or not networks <= {a.network, LOOPBACK_NETWORK}:
            continue
        try:
            n, errs = release_sandbox(container, attachments, a.cni_path)
        except Exception as e:  # one bad entry must not stop the others' release
            n, errs = 0, [f"{container[:12]}: {type(e).__name__}: {e}"]
        released += n
        errors += errs
    swept, errs = sweep_masquerade(a.network)
    errors += errs
    for e in errors:
        warn(e)
    if released or swept or errors:
        warn(f"released {released} attachment(s) of {a.network} sandboxes"
             + (f"; removed {swept} stale NAT rule(s) and chain(s)" if swept else "")
             + (f"; {len(errors)} error(s) above" if errors else ""))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
