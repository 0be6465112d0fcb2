"""Starting a build part-way: the output root of a build that committed its first stages and stopped."""

from __future__ import annotations

import os
import shutil


def copy_layers_before(stage: str, reference_root: str, root: str, run_order: list[str]) -> None:
    """Copy the reference's snapshot and the complete layers (with their dead letters) of the stages
    that run before ``stage``: what a build stopped just before ``stage`` leaves, so the next build of
    the same config reuses them and computes ``stage`` and what follows."""
    shutil.copytree(os.path.join(reference_root, "snapshots"), os.path.join(root, "snapshots"))
    for earlier in run_order[: run_order.index(stage)]:
        for folder in ("layers", "dead_letter"):
            if os.path.isdir(os.path.join(reference_root, folder, earlier)):
                shutil.copytree(os.path.join(reference_root, folder, earlier), os.path.join(root, folder, earlier))
