"""Benchmark row: ``exec(["true"])`` through the envrt Python package (local driver)
against Inspect AI's built-in local sandbox provider and ``subprocess.run``, measured
interleaved (one run of each per round, the order rotated every round) so that load from
anything else on the machine hits all of them alike. Also the envrt Inspect provider
(the package plus Inspect's adapter). Prints a Markdown table; ``--json PATH`` writes it.

    python bench/exec_true.py [--rounds N] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Awaitable, Callable

import envrt

GOAL = 1.2  # the package against Inspect's local provider, p50


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--json")
    args = parser.parse_args()

    from inspect_ai.util._sandbox.local import LocalSandboxEnvironment

    from envrt._inspect import EnvrtSandboxEnvironment

    with tempfile.TemporaryDirectory(prefix="envrt-bench-py-") as root:
        runtime = await envrt.Runtime.create(local_root=f"{root}/workspaces")
        lease = await runtime.acquire("local")
        provider = EnvrtSandboxEnvironment(lease)
        inspect_local = (await LocalSandboxEnvironment.sample_init("bench", None, {}))["default"]

        async def package() -> None:
            assert (await lease.exec(["true"])).exit_code == 0

        async def envrt_provider() -> None:
            assert (await provider.exec(["true"])).success

        async def inspect_provider() -> None:
            assert (await inspect_local.exec(["true"])).success

        async def subprocess_run() -> None:
            assert subprocess.run(["true"]).returncode == 0

        cases: dict[str, Callable[[], Awaitable[None]]] = {
            "envrt package exec": package,
            "envrt Inspect provider exec": envrt_provider,
            "Inspect local provider exec": inspect_provider,
            "subprocess.run": subprocess_run,
        }
        samples: dict[str, list[float]] = {name: [] for name in cases}
        names = list(cases)
        for round_ in range(args.warmup + args.rounds):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                start = time.perf_counter()
                await cases[name]()
                if round_ >= args.warmup:
                    samples[name].append(time.perf_counter() - start)
        await lease.release()
        await LocalSandboxEnvironment.sample_cleanup("bench", None, {"default": inspect_local}, False)

    def p(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    rows = {
        name: {"p50_ms": statistics.median(values) * 1000, "p99_ms": p(values, 0.99)}
        for name, values in samples.items()
    }
    base = rows["Inspect local provider exec"]["p50_ms"]
    sub = rows["subprocess.run"]["p50_ms"]
    print(f"exec(['true']), {args.rounds} interleaved rounds, local driver\n")
    print("| path | p50 | p99 | p50 vs Inspect local | p50 vs subprocess.run |")
    print("|---|---|---|---|---|")
    for name, row in rows.items():
        print(
            f"| {name} | {row['p50_ms']:.3f} ms | {row['p99_ms']:.3f} ms | "
            f"{row['p50_ms'] / base:.2f}× | {row['p50_ms'] / sub:.2f}× |"
        )
    ratio = rows["envrt package exec"]["p50_ms"] / base
    met = ratio <= GOAL
    print(f"\nenvrt package vs Inspect local provider: {ratio:.2f}× (goal ≤ {GOAL}×: {'met' if met else 'NOT met'})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"rounds": args.rounds, "rows": rows, "ratio_vs_inspect_local": ratio, "goal": GOAL, "met": met}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
