#!/usr/bin/env python3
"""Writes a small synthetic sample of Alibaba cluster-trace-v2018 (same files, same headerless
columns as the real trace: https://github.com/alibaba/clusterdata/blob/master/cluster-trace-v2018/schema.md)
for the converter's tests and docs/simulator.md. Deterministic: `python3 generate.py` rewrites
the five CSVs beside it byte for byte.

It is synthetic, not an excerpt: 12 machines (6 x 32 cores, 6 x 64 cores), 50 long-running
containers in 8 deploy units (services, network- and disk-heavy ones) and about 400 batch
instances over four hours of trace time (86 400 s to 100 800 s), with the real trace's quirks:
containers created before the trace (time_stamp 0), several meta rows per container and per
machine, usage samples holding the invalid values -1 and 101, batch instances that were not
scheduled (start_time 0), and instances on machines outside the sample.
"""
import math
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = 86_400
SPAN = 14_400
STEP = 120
rng = random.Random(2018)


def write(name, rows):
    with open(os.path.join(HERE, name), "w", newline="\n") as f:
        for r in rows:
            f.write(",".join(str(x) for x in r) + "\n")


machines = [f"m_{i}" for i in range(1, 13)]
meta = []
for i, m in enumerate(machines):
    cores, mem = (32, 50) if i % 2 == 0 else (64, 100)
    fd1 = 1 + i % 3
    fd2 = f"fd2_{1 + i % 2}"
    meta.append((m, 0, fd1, fd2, cores, mem, "USING"))
    if i == 3:  # a machine event row inside the window; the last row wins
        meta.append((m, T0 + 3_000, fd1, fd2, cores, mem, "USING"))
write("machine_meta.csv", meta)

units = [
    # (deploy unit, containers, cpu_request (100 = 1 core), mem_size, cpu%, net%, disk%)
    ("app_web", 10, 400, 2, (20, 45), (1, 4), (0.2, 1)),
    ("app_api", 8, 800, 4, (25, 55), (1, 5), (0.2, 1)),
    ("app_cache", 6, 200, 12, (15, 35), (3, 8), (0, 0.5)),
    ("app_gateway", 6, 400, 2, (30, 60), (8, 20), (0, 0.5)),
    ("app_search", 6, 800, 6, (35, 70), (2, 6), (5, 12)),
    ("app_logs", 6, 200, 3, (20, 40), (3, 8), (8, 20)),
    ("app_mq", 4, 400, 4, (20, 40), (4, 10), (3, 8)),
    ("app_cron", 4, 200, 1, (10, 30), (0.2, 1), (0.2, 1)),
]
cmeta, cusage = [], []
n = 0
for unit, count, cpu, mem, cpu_pct, net_pct, disk_pct in units:
    for _ in range(count):
        n += 1
        cid = f"c_{n}"
        host = machines[rng.randrange(len(machines))]
        created = 0 if rng.random() < 0.7 else T0 + rng.randrange(0, SPAN // 2)
        cmeta.append((cid, host, created, unit, "allocated", cpu, cpu, mem))
        started = created if created else T0 - 3_600
        cmeta.append((cid, host, started + 30 if created else 0, unit, "started", cpu, cpu, mem))
        phase = rng.random()
        base = [rng.uniform(*cpu_pct), rng.uniform(*net_pct), rng.uniform(*disk_pct)]
        mem_pct = rng.uniform(50, 90)
        t = max(T0, created + 60)
        while t < T0 + SPAN:
            swing = 1 + 0.35 * math.sin(2 * math.pi * ((t - T0) / SPAN + phase))
            cpu_v = round(min(100, base[0] * swing * rng.uniform(0.85, 1.15)))
            mem_v = round(min(100, mem_pct * rng.uniform(0.97, 1.03)))
            net_in = round(min(100, base[1] * swing * rng.uniform(0.8, 1.2)), 2)
            net_out = round(min(100, base[1] * 0.8 * swing * rng.uniform(0.8, 1.2)), 2)
            disk = round(min(100, base[2] * swing * rng.uniform(0.8, 1.2)), 2)
            r = rng.random()
            if r < 0.01:
                cpu_v = -1
            elif r < 0.02:
                disk = 101
            cpi = round(rng.uniform(0.8, 2.5), 2)
            gps = round(rng.uniform(0, 10), 2)
            mpki = rng.randrange(0, 12)
            cusage.append((cid, host, t, cpu_v, mem_v, cpi, gps, mpki, net_in, net_out, disk))
            t += STEP
write("container_meta.csv", cmeta)
cusage.sort(key=lambda r: (r[2], int(r[0][2:])))
write("container_usage.csv", cusage)

tasks, instances = [], []
for j in range(1, 41):
    job = f"j_{j}"
    start = T0 - 600 + rng.randrange(0, SPAN)
    ntasks = rng.choice([1, 1, 2, 3])
    for k in range(1, ntasks + 1):
        task = f"M{k}" if k == 1 else f"R{k}_{k - 1}"
        inst_num = rng.choice([2, 4, 8, 12, 20])
        plan_cpu = rng.choice([50, 100, 200, 400])
        plan_mem = round(rng.uniform(0.1, 0.8), 2)
        t_start = start
        t_end = start
        for s in range(1, inst_num + 1):
            machine = machines[rng.randrange(len(machines))] if rng.random() < 0.9 else "m_9999"
            i_start = t_start + rng.randrange(0, 60)
            i_end = i_start + rng.randrange(300, 2_400)
            t_end = max(t_end, i_end)
            cpu_avg = round(plan_cpu * rng.uniform(0.5, 1.4))
            cpu_max = round(cpu_avg * rng.uniform(1.1, 2.5))
            mem_avg = round(plan_mem * rng.uniform(0.5, 1.0), 2)
            mem_max = round(min(100, mem_avg * rng.uniform(1.0, 1.3)), 2)
            if rng.random() < 0.03:  # never ran: the trace writes 0 times and no usage
                instances.append((f"ins_{j}_{k}_{s}", task, job, 1, "Waiting", 0, 0, "", 1, 1, "", "", "", ""))
                continue
            instances.append((f"ins_{j}_{k}_{s}", task, job, 1, "Terminated", i_start, i_end, machine,
                              1, 1, cpu_avg, cpu_max, mem_avg, mem_max))
        tasks.append((task, inst_num, job, 1, "Terminated", t_start, t_end, plan_cpu, plan_mem))
        start = t_end + 30
write("batch_task.csv", tasks)
instances.sort(key=lambda r: (r[5], r[0]))
write("batch_instance.csv", instances)
