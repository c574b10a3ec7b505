#!/usr/bin/env python3
"""Writes the binary and generated seeds of the fuzz corpus: protobuf-encoded
loadstar.v1.NodeReport and ScoreRequest messages (hand-encoded here, so no protoc is needed),
sampler_values records, and the JSON seeds. Run from anywhere; it writes under corpus/.
The text seeds (/proc files, cgroup files, YAML) are copied files, not generated."""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def u(field, n):
    return key(field, 0) + varint(n)


def d(field, x):
    return key(field, 1) + struct.pack("<d", x)


def s(field, b):
    if isinstance(b, str):
        b = b.encode()
    return key(field, 2) + varint(len(b)) + b


def window(seconds, mean, stddev):
    return (u(1, seconds) + d(2, mean) + d(3, stddev) + d(4, max(0.0, mean - stddev))
            + d(5, min(1.0, mean + stddev)) + d(6, min(1.0, mean + stddev)) + u(7, seconds))


def usage(resource, mean):
    return u(1, resource) + d(2, mean) + b"".join(
        s(3, window(w, mean, 0.05)) for w in (60, 300, 900))


def report(name, full):
    capacity = u(1, 8) + d(2, 3.0e9) + u(3, 32 << 30)
    if full:
        capacity += s(4, s(1, "ens3") + u(2, 10_000_000_000))
        capacity += s(5, s(1, "nvme0n1") + u(2, 2_000_000_000) + u(3, 2))
        capacity += s(6, u(1, 0) + s(2, "GPU-0b1c2d3e") + s(3, "NVIDIA A100") + u(4, 40 << 30))
    msg = s(1, name) + s(2, "0.1.0") + u(3, 7) + u(4, 1_767_225_600_000_000_000) + d(5, 1.0)
    msg += s(6, capacity)
    for res, mean in ((1, 0.42), (2, 0.61)) + (((3, 0.1), (4, 0.2), (5, 0.3), (6, 0.25)) if full else ()):
        msg += s(7, usage(res, mean))
    if full:
        msg += s(8, s(1, "ens3") + d(2, 1.5e6) + d(3, 2.5e6) + d(4, 0.002))
        msg += s(9, s(1, "nvme0n1") + d(2, 1e7) + d(3, 2e7) + d(4, 100.0) + d(5, 250.0) + d(6, 0.15))
        msg += s(10, u(1, 0) + s(2, "GPU-0b1c2d3e") + d(3, 0.3) + u(4, 4 << 30) + u(5, 40 << 30)
                 + u(6, 2) + d(7, 55.0) + d(8, 180.0))
        msg += s(12, s(1, "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0") + d(2, 0.75) + u(3, 512 << 20))
        msg += s(13, s(1, "disk") + s(2, "reading /proc/diskstats: permission denied"))
    msg += s(11, u(1, 12 << 30) + d(2, 0.4) + d(3, 0.9) + u(4, 100 << 30))
    msg += s(14, "3f2a9c")
    return msg


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web-7d9f8",
        "namespace": "shop",
        "uid": "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0",
        "labels": {"app": "web"},
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f",
                             "uid": "11111111-2222-3333-4444-555555555555", "controller": True}],
    },
    "spec": {
        "schedulerName": "loadstar",
        "priority": 100,
        "containers": [{
            "name": "web",
            "image": "nginx:1.27",
            "resources": {"requests": {"cpu": "250m", "memory": "128Mi"},
                          "limits": {"cpu": "1", "memory": "256Mi"}},
            "ports": [{"containerPort": 8080, "hostPort": 18080, "protocol": "TCP"}],
        }],
        "initContainers": [{"name": "init", "image": "busybox",
                            "resources": {"requests": {"cpu": "500m", "ephemeral-storage": "1Gi"}}}],
        "overhead": {"cpu": "10m", "memory": "20Mi"},
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
                        {"operator": "Exists", "effect": "NoExecute"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In",
                                           "values": ["z1", "z2"]}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 10, "preference": {"matchExpressions": [
                        {"key": "disk", "operator": "Exists"}]}}]},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}},
                 "topologyKey": "kubernetes.io/hostname"}]},
        },
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                       "whenUnsatisfiable": "ScheduleAnyway",
                                       "labelSelector": {"matchLabels": {"app": "web"}}}],
    },
    "status": {"phase": "Pending"},
}

GPU_POD = {
    "metadata": {"name": "train", "namespace": "ml"},
    "spec": {"containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": "1"},
                                                          "requests": {"cpu": "2", "memory": "8Gi"}}}]},
}

NODE = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "node-a", "labels": {"topology.kubernetes.io/zone": "z1"}},
    "spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]},
    "status": {"allocatable": {"cpu": "7910m", "memory": "31Gi", "pods": "110", "nvidia.com/gpu": "2"},
               "conditions": [{"type": "Ready", "status": "True"}]},
}


def write(target, name, data):
    d_ = os.path.join(HERE, "corpus", target)
    os.makedirs(d_, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d_, name), "wb") as f:
        f.write(data)


def main():
    write("node_report", "minimal.pb", report("node-a", False))
    write("node_report", "full.pb", report("worker-1.example.com", True))

    desc = (s(1, "shop") + s(2, "web") + s(3, s(1, "app") + s(2, "web"))
            + s(4, s(1, "ReplicaSet") + s(2, "web-7d9f") + s(3, "uid-rs"))
            + s(5, s(1, "cpu") + s(2, "250m")) + s(5, s(1, "memory") + s(2, "128Mi"))
            + s(6, s(1, "cpu") + s(2, "1")) + s(7, s(1, "disk") + s(2, "ssd"))
            + s(8, s(1, "dedicated") + s(2, "Equal") + s(3, "gpu") + s(4, "NoSchedule"))
            + u(9, 100))
    write("score_request", "description.pb", s(1, desc) + s(3, "node-a") + s(3, "node-b") + s(4, "loadstar") + u(5, 3))
    write("score_request", "pod-json.pb", s(6, json.dumps(POD)) + u(7, 1))
    write("score_request", "gpu-pod-json.pb", s(6, json.dumps(GPU_POD)))

    write("pod_json", "pod.json", json.dumps(POD, indent=1))
    write("pod_json", "gpu-pod.json", json.dumps(GPU_POD))
    write("pod_json", "node.json", json.dumps(NODE))

    write("extender", "filter-names.json",
          json.dumps({"Pod": POD, "Nodes": None, "NodeNames": ["node-a", "node-b", "node-c", "node-d", "node-x"]}))
    write("extender", "filter-nodes.json",
          json.dumps({"Pod": GPU_POD, "Nodes": {"items": [NODE, {"metadata": {"name": "node-b"}}]}}))
    write("extender", "minimal.json",
          json.dumps({"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["node-a", "node-c"]}))

    # sampler_values: 34-byte device records (index, total, used, utilisation bits, processes, flags).
    def dev(i, total, used, util, procs, flags):
        return struct.pack("<IQQdIH", i, total, used, util, procs, flags)
    write("sampler_values", "two-gpus",
          dev(0, 40 << 30, 4 << 30, 0.3, 2, 55 << 8) + dev(1, 40 << 30, 0, 0.0, 0, 1))
    write("sampler_values", "statvfs", struct.pack("<QQQQQ", 4096, 25_000_000, 10_000_000, 6_000_000, 5_000_000))


if __name__ == "__main__":
    main()
