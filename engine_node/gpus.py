"""The host's GPU inventory for the agent's hello, read with nvidia-smi when the host has one."""

import shutil
import subprocess

# mig.mode.current: "Enabled" where the GPU is split into MIG instances (whose utilisation NVML does not give).
QUERY = "index,name,uuid,memory.total,driver_version,mig.mode.current"


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
        if len(fields) not in (5, 6):
            continue
        index, name, uuid, memory_mib, driver = fields[:5]
        try:
            gpu = {"index": int(index), "name": name, "uuid": uuid, "memory_mib": int(float(memory_mib))}
        except ValueError:
            continue
        gpu["driver"] = driver
        if len(fields) == 6:
            gpu["mig"] = fields[5] == "Enabled"
        gpus.append(gpu)
    return gpus
