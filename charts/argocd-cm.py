#!/usr/bin/env python3
"""Prints the argocd-cm data for PseudoFlow (the health check and the resource actions) from
the chart's argocd/ scripts: the snippet docs/gitops.md shows and charts/test.sh checks it still
shows. `--yaml` prints a whole ConfigMap's data map only (no prose)."""
import os
import sys

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pseudoflow-operator", "argocd")
ACTIONS = ["approve", "reject", "retry", "retry-from-failed", "stop", "suspend", "resume",
           "rollout-pause", "rollout-resume", "rollout-promote", "rollout-undo"]


def read(*path):
    with open(os.path.join(HERE, *path)) as f:
        return f.read()


def block(text, indent):
    pad = " " * indent
    return "".join(pad + line if line.strip() else "\n" for line in text.splitlines(True))


def snippet():
    out = ["data:\n", "  resource.customizations.health.ops.example.com_PseudoFlow: |\n"]
    out.append(block(read("health.lua"), 4))
    out.append("  resource.customizations.actions.ops.example.com_PseudoFlow: |\n")
    out.append("    discovery.lua: |\n")
    out.append(block(read("actions", "discovery.lua"), 6))
    out.append("    definitions:\n")
    for name in ACTIONS:
        out.append(f"    - name: {name}\n      action.lua: |\n")
        out.append(block(read("actions", name, "action.lua"), 8))
    return "".join(out)


if __name__ == "__main__":
    sys.stdout.write(snippet())
