"""The host's GPU inventory for the agent's hello, read with nvidia-smi when the host has one."""

import shutil
import subprocess

QUERY = "index,name,uuid,memory.total,driver_version"


def gpu_inventory() -> list[dict]:
    """One entry per GPU; an empty list on a host without NVIDIA GPUs or when nvidia-smi fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        output = subprocess.run(
            [smi, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return parse(output)


def parse(output: str) -> list[dict]:
    gpus = []
    for line in output.strip().splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 5:
            continue
        index, name, uuid, memory_mib, driver = fields
        gpus.append(
            {
                "index": int(index),
                "name": name,
                "uuid": uuid,
                "memory_mib": int(float(memory_mib)),
                "driver": driver,
            }
        )
    return gpus
