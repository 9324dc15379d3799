#!/usr/bin/env python3
"""bench/llm_tokens' bound from the bytes the drive served (bench/served_bound.h), end to end on a GPU: a
generated tiny qwen3moe on a modeled pcie4, at three budgets (everything on NVMe; the dense parts in RAM;
the dense parts and a RAM expert cache of half the experts), the prefetch off and auto. Each cell's JSON
must hold the served bytes (drive_bytes_served / tokens = nvme_bytes_per_token) and the plan's figures
beside them; the bound must stand above the measured rate (efficiency at most 1.05: the timing window's
edges); the drive must serve less once the dense parts leave it, and less again once the expert cache hits
(prefetch off, so no read is wasted). A cell where no prefetch ran has the dependent chain's bound
(bench/chain_bound.h) and only such a cell: never above the bytes bound, the rate at most 1.05 of it, and
equal to max(the bytes bound's time, the time outside the reads + the expert bytes at the drive's rate).
Exit 77 without a GPU (llm_tokens refuses before opening a model).
  llm_tokens_served.py --llm-tokens BUILD/bench/llm_tokens
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tool_run import exit_status, run  # noqa: E402

DEVICE = "emu:gen,shape=tiny-qwen3moe,type=q4_k"
VRAM = "64K"
TOKENS = 8


def cells(exe, budgets, prefetch, out):
    """(exit status, output, cells of the JSON)."""
    rc, text = run([exe, "--device", DEVICE, "--budgets", budgets, "--drives", "pcie4", "--modes", "gpunvme",
                    "--expert-prefetch", prefetch, "--tokens", str(TOKENS), "--json-out", out], timeout=300)
    found = []
    if os.path.exists(out):
        with open(out) as f:
            found = [json.loads(line) for line in f if line.strip()]
    return rc, text, found


def chain_failures(what, c):
    """The chain bound's members of one cell: present exactly where no prefetch ran, and consistent."""
    chain, ran = c.get("chain_bound_tokens_per_second"), c.get("prefetch")
    if ran is False and chain is None:
        return [f"{what}: no prefetch ran, yet no chain_bound_tokens_per_second"]
    if ran and chain is not None:
        return [f"{what}: a prefetch ran, yet a chain bound (no floor then)"]
    if chain is None:
        return []
    out = []
    bound = c["bound_tokens_per_second"]
    if chain > bound * (1 + 1e-6):
        out.append(f"{what}: chain bound {chain} tok/s above the bytes bound {bound}")
    if c["chain_efficiency"] > 1.05:
        out.append(f"{what}: {c['tokens_per_second']:.1f} tok/s is {100 * c['chain_efficiency']:.0f} % of the chain bound")
    outside, floor = c["chain_outside_reads_seconds_per_token"], c["chain_read_floor_seconds_per_token"]
    if outside < 0 or floor < 0 or (floor == 0 and c.get("drive_bytes_per_second")) or c["chain_fetches_per_token"] <= 0:
        out.append(f"{what}: chain members outside {outside}, read floor {floor}, fetches {c['chain_fetches_per_token']}")
    want = max(1 / bound, outside + floor)
    if abs(1 / chain - want) > 2e-6 + 1e-4 * want:
        out.append(f"{what}: chain bound {1 / chain:.6f} s a token, not max(bytes {1 / bound:.6f}, outside + floor {outside + floor:.6f})")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llm-tokens", required=True)
    a = ap.parse_args()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        # VRAM: the KV cache (20 KiB here) counts in the budget, and no layer (227 KiB of dense bytes) fits in 64K
        rc, text, first = cells(a.llm_tokens, f"{VRAM}:0", "off", os.path.join(tmp, "plan.jsonl"))
        if rc != 0 and "needs a GPU" in text:
            print("SKIP: " + text.strip().splitlines()[-1])
            return 77
        if rc != 0 or len(first) != 1 or not first[0].get("plan"):
            print(text)
            return exit_status([f"the 0:0 run: exit {rc}, {len(first)} cell(s)"], "no plan to size the budgets from")
        plan = first[0]["plan"]
        dense, experts = sum(plan["layer_dense_bytes"]), sum(plan["layer_expert_bytes"])
        cache = f"{VRAM}:{dense + experts // 2}"
        budgets = f"{VRAM}:0,{VRAM}:{dense},{cache}"
        rc, text, got = cells(a.llm_tokens, budgets, "off,auto", os.path.join(tmp, "cells.jsonl"))
        print(text)
        if rc != 0:
            failures.append(f"llm_tokens --budgets {budgets}: exit {rc}")
        if "NVMe/tok" not in text:
            failures.append("the table has no NVMe/tok column")
        by = {}
        for c in got:
            what = f"{c['budget']} {c['expert_prefetch']}"
            by[what] = c
            if c.get("error"):
                failures.append(f"{what}: {c['error']}")
                continue
            for key in ("plan_bound_tokens_per_second", "plan_efficiency", "plan_nvme_bytes_per_token", "drive_bytes_served"):
                if key not in c:
                    failures.append(f"{what}: no {key} in the JSON")
            served = c.get("drive_bytes_served") or []
            if len(served) != 1 or abs(sum(served) / c["tokens"] - c["nvme_bytes_per_token"]) > 1:
                failures.append(f"{what}: drive_bytes_served {served} over {c['tokens']} tokens is not nvme_bytes_per_token "
                                f"{c['nvme_bytes_per_token']}")
            failures += chain_failures(what, c)
            if c.get("efficiency") is not None and c["efficiency"] > 1.05:
                failures.append(f"{what}: {c['tokens_per_second']:.1f} tok/s is {100 * c['efficiency']:.0f} % of the served bound")
            print(f"{what}: {c['tokens_per_second']:.1f} tok/s, bound {c['bound_tokens_per_second']}, NVMe "
                  f"{c['nvme_bytes_per_token']} B/token (plan {c['plan_nvme_bytes_per_token']}), expert hits "
                  f"{c['expert_hits']}/{c['experts_routed']}")
        seen = list(dict.fromkeys(c["budget"] for c in got))  # the three budgets as the JSON spells them
        need = [f"{b} off" for b in seen] if len(seen) == 3 else ["the three budgets"]
        if any(k not in by or by[k].get("error") for k in need):
            failures.append(f"cells missing or failed among {need}")
        else:
            all_nvme, no_cache, cached = (by[k]["nvme_bytes_per_token"] for k in need)
            if not 0 < no_cache < all_nvme:
                failures.append(f"the dense parts in RAM: {no_cache} B/token served, with everything on NVMe {all_nvme}")
            if by[need[2]]["expert_hits"] == 0:
                failures.append(f"{need[2]}: the expert cache never hit (nothing to compare)")
            elif not cached < no_cache:
                failures.append(f"{need[2]}: {cached} B/token served with the cache hitting, {no_cache} without it")
    return exit_status(failures, f"{len(got)} cells checked")


if __name__ == "__main__":
    sys.exit(main())
