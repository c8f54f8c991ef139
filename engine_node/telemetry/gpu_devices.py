"""Which of the host's GPUs the engine uses, so that its figures are those GPUs' and no other's.

One node per GPU (CUDA_VISIBLE_DEVICES=0, =1, ...) must not report the host's mean, and NVML's index 0 is not
CUDA's device 0 in general: CUDA numbers the devices it can see, in its own order (CUDA_DEVICE_ORDER, fastest first
by default), and CUDA_VISIBLE_DEVICES may name them by UUID or name MIG instances. So, best source first:

1. the engine's own workers: each one's CUDA device UUID, from the worker extension's reading (the GPU that worker
   really runs on, whatever the environment said);
2. CUDA_VISIBLE_DEVICES, which the engine inherits from the agent, read as CUDA and PyTorch read it
   (`parse_visible_devices` follows torch.cuda._parse_visible_devices): UUIDs (or unique prefixes of them) map to
   the GPU with that UUID; ordinals map to NVML indices only where CUDA's order is the PCI order NVML uses
   (CUDA_DEVICE_ORDER=PCI_BUS_ID, or all the host's GPUs of one model, whose fastest-first order is the PCI order);
3. a host with exactly one GPU.

Otherwise the engine's GPUs are not known yet, and the figures are null with that reason rather than the host's.
A MIG instance has no NVML utilisation of its own (nvidia-smi prints [N/A] for a MIG-enabled GPU): its utilisation
is null with the reason (DCGM's profiling metrics measure a GPU instance), its memory the worker's own reading.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

NOT_KNOWN = (
    "which of this host's GPUs the engine uses is not known yet (no reading from its workers; CUDA_VISIBLE_DEVICES "
    "unset or in an order NVML does not share)"
)
MIG = (
    "the engine runs on a MIG instance: NVML has no utilization.gpu for a GPU instance (DCGM's profiling metrics "
    "measure one: --dcgm-exporter-url)"
)


def parse_visible_devices(value: str | None) -> list[int] | list[str] | None:
    """CUDA_VISIBLE_DEVICES as CUDA reads it: None when unset (every device), else the ordinals (a leading number
    of each entry, up to the first negative one) or the "GPU-"/"MIG-" UUIDs (up to the first entry without the
    prefix); a repeated entry makes the list empty."""
    if value is None:
        return None
    if value.startswith(("GPU-", "MIG-")):
        prefix, uuids = value[:4], []
        for item in value.split(","):
            if item in uuids:
                return []
            if not item.startswith(prefix):
                break
            uuids.append(item)
        return uuids
    ordinals: list[int] = []
    for item in value.split(","):
        number = _leading_number(item.strip())
        if number in ordinals:
            return []
        if number < 0:
            break
        ordinals.append(number)
    return ordinals


def _leading_number(text: str) -> int:
    """strtoul's reading: the number the text starts with (an optional sign, then digits), -1 when none."""
    end = 0
    for index, char in enumerate(text):
        if char.isdigit() or (index == 0 and char in "+-"):
            end = index + 1
        else:
            break
    digits = text[:end]
    if not digits or digits in "+-":
        return -1
    return int(digits)


@dataclass(frozen=True)
class EngineDevices:
    """The NVML indices of the whole GPUs the engine uses, its MIG instances (with the workers' memory reading), where
    that came from, and why nothing is known when `indices` and `mig` are both empty."""

    indices: tuple[int, ...] = ()
    mig: tuple[dict, ...] = ()
    source: str = ""
    reason: str = NOT_KNOWN
    unknown: tuple[str, ...] = field(default=())

    @property
    def known(self) -> bool:
        return bool(self.indices or self.mig)


def resolve_devices(
    inventory: list[dict],
    *,
    workers: list[dict] | None = None,
    visible: str | None = None,
    device_order: str | None = None,
) -> EngineDevices:
    """The engine's GPUs among `inventory` (engine_node/gpus.py), from the workers' readings (each with its
    device_uuid), else CUDA_VISIBLE_DEVICES (`visible`, with CUDA_DEVICE_ORDER), else the host's only GPU."""
    by_uuid = {gpu["uuid"]: gpu for gpu in inventory if gpu.get("uuid")}
    uuids = [w["device_uuid"] for w in workers or () if isinstance(w.get("device_uuid"), str)]
    if uuids:
        indices, mig, unknown = [], [], []
        for worker in workers or ():
            uuid = worker.get("device_uuid")
            if not isinstance(uuid, str):
                continue
            if uuid in by_uuid:
                indices.append(by_uuid[uuid]["index"])
            elif uuid.startswith("MIG-") or any(gpu.get("mig") for gpu in inventory):
                mig.append({key: worker.get(key) for key in ("device_uuid", "device_total_bytes", "device_free_bytes")})
            else:
                unknown.append(uuid)
        return EngineDevices(
            indices=tuple(sorted(set(indices))),
            mig=tuple(mig),
            source="the engine's workers",
            reason=MIG if mig and not indices else NOT_KNOWN,
            unknown=tuple(unknown),
        )
    listed = parse_visible_devices(visible)
    if listed:
        if isinstance(listed[0], str):
            matched = [_by_prefix(str(item), by_uuid) for item in listed]
            if all(gpu is not None for gpu in matched):
                return EngineDevices(indices=tuple(gpu["index"] for gpu in matched), source="CUDA_VISIBLE_DEVICES")
            if all(str(item).startswith("MIG-") for item in listed):
                return EngineDevices(reason=MIG, source="CUDA_VISIBLE_DEVICES")
        elif _pci_order(inventory, device_order):
            present = {gpu["index"] for gpu in inventory}
            indices = [int(item) for item in listed if int(item) in present]
            if indices:
                return EngineDevices(indices=tuple(indices), source="CUDA_VISIBLE_DEVICES")
    elif listed is None and len(inventory) == 1:
        return EngineDevices(indices=(inventory[0]["index"],), source="the host's only GPU")
    return EngineDevices()


def engine_devices(inventory: list[dict], workers: list[dict] | None, environ: Mapping[str, str] = os.environ):
    """resolve_devices with the CUDA variables the engine inherits from the agent's environment."""
    return resolve_devices(
        inventory,
        workers=workers,
        visible=environ.get("CUDA_VISIBLE_DEVICES"),
        device_order=environ.get("CUDA_DEVICE_ORDER"),
    )


def _by_prefix(candidate: str, by_uuid: dict) -> dict | None:
    """The one GPU whose UUID starts with `candidate` (CUDA accepts a unique prefix), else None."""
    matches = [gpu for uuid, gpu in by_uuid.items() if uuid.startswith(candidate)]
    return matches[0] if len(matches) == 1 else None


def _pci_order(inventory: list[dict], device_order: str | None) -> bool:
    """Whether CUDA's ordinals follow NVML's (PCI bus) order on this host."""
    return device_order == "PCI_BUS_ID" or len({gpu.get("name") for gpu in inventory}) <= 1
