"""GPU figures of the GPUs the engine uses, never the host's mean: which GPUs (the workers' own devices, else
CUDA_VISIBLE_DEVICES, else the host's only GPU), per-device figures, and MIG instances, which NVML gives no
utilisation. nvidia-smi's lines are fed as it prints them; the engine's workers' readings are the extension's
format (device_uuid and the device's memory). tests/engine_node/test_vllm_gpu_paths.py checks the parsing of
CUDA_VISIBLE_DEVICES against PyTorch's own."""

from engine_node.admission import Admission
from engine_node.gpus import parse
from engine_node.telemetry import BatchLog, EngineScraper, GpuUtilisation, RequestLog, SmActivity, Telemetry
from engine_node.telemetry.gpu_devices import MIG, NOT_KNOWN, engine_devices, parse_visible_devices, resolve_devices

GIB = 1 << 30
H200 = [{"index": i, "name": "NVIDIA H200", "uuid": f"GPU-{i}aaa-{i}", "memory_mib": 143771, "mig": False}
        for i in range(4)]  # fmt: skip
MIXED = [{**H200[0], "name": "NVIDIA H100 80GB HBM3"}, *H200[1:]]
# One second of `nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total`: each GPU busy differently.
SMI_LINES = ["0, 10, 14377, 143771", "1, 90, 129394, 143771", "2, 50, 71885, 143771", "3, 30, 28754, 143771"]


def clock():
    return 100.0


def gpu_for(devices) -> GpuUtilisation:
    gpu = GpuUtilisation(clock=clock, devices=devices)
    for line in SMI_LINES:
        gpu.feed(line)
    return gpu


def test_one_node_per_gpu_reports_its_own_gpu():
    nodes = {
        visible: gpu_for(lambda visible=visible: engine_devices(H200, None, {"CUDA_VISIBLE_DEVICES": visible}))
        for visible in ("0", "1", "2,3")
    }
    assert [round(n.value(), 6) for n in nodes.values()] == [0.1, 0.9, 0.4]
    assert [round(n.memory_used(), 3) for n in nodes.values()] == [0.1, 0.9, 0.35]
    assert nodes["2,3"].devices() == [
        {"index": 2, "gpu_util": 0.5, "gpu_memory_used": 71885 / 143771},
        {"index": 3, "gpu_util": 0.3, "gpu_memory_used": 28754 / 143771},
    ]
    host_mean = gpu_for(None)  # what every node used to report
    assert round(host_mean.value(), 6) == 0.45


def test_the_workers_own_devices_win_over_the_environment():
    # CUDA_VISIBLE_DEVICES says 0, but the workers run on NVML's GPUs 3 and 1 (CUDA's order was not NVML's).
    workers = [{"rank": 0, "device_uuid": "GPU-3aaa-3"}, {"rank": 1, "device_uuid": "GPU-1aaa-1"}]
    devices = engine_devices(H200, workers, {"CUDA_VISIBLE_DEVICES": "0"})
    assert devices.indices == (1, 3) and devices.source == "the engine's workers"
    assert round(gpu_for(lambda: devices).value(), 6) == 0.6


def test_cuda_ordinals_map_to_nvml_only_where_the_orders_agree():
    assert resolve_devices(H200, visible="1,0").indices == (1, 0)  # one model of GPU: fastest first is PCI order
    assert not resolve_devices(MIXED, visible="1").known  # mixed models, CUDA's fastest-first order: unknown
    assert resolve_devices(MIXED, visible="1", device_order="PCI_BUS_ID").indices == (1,)
    assert resolve_devices(MIXED, visible="GPU-2aa").indices == (2,)  # a unique UUID prefix, as CUDA takes it
    assert not resolve_devices(H200).known  # several GPUs, nothing said: not the host's mean
    assert resolve_devices(H200[:1]).indices == (0,) and resolve_devices(H200[:1]).source == "the host's only GPU"
    assert not resolve_devices(H200, visible="").known  # no GPU visible to the engine
    assert parse_visible_devices("1,1") == [] and parse_visible_devices("2,-1,0") == [2]


def test_unknown_devices_give_null_figures_with_the_reason():
    gpu = gpu_for(lambda: resolve_devices(H200))
    assert gpu.value() is None and gpu.memory_used() is None
    sample = telemetry(gpu).build_sample()["m"]
    assert sample["gpu_util"] is None and sample["absent"]["gpu_util"] == NOT_KNOWN


def test_a_mig_instance_has_memory_from_its_worker_and_no_utilisation():
    inventory = [{**H200[0], "mig": True}]
    worker = {"device_uuid": "MIG-5d1e", "device_total_bytes": 16 * GIB, "device_free_bytes": 12 * GIB}
    devices = engine_devices(inventory, [worker], {"CUDA_VISIBLE_DEVICES": "MIG-5d1e"})
    assert devices.indices == () and devices.reason == MIG
    gpu = GpuUtilisation(clock=clock, devices=lambda: devices)
    gpu.feed("0, [N/A], 40000, 143771")  # nvidia-smi on a MIG-enabled GPU: no utilisation, the parent's memory
    assert gpu.value() is None and gpu.memory_used() == 0.25
    assert gpu.devices() == [{"uuid": "MIG-5d1e", "mig": True, "gpu_util": None, "gpu_memory_used": 0.25}]
    sample = telemetry(gpu).build_sample()["m"]
    assert sample["gpu_memory_used"] == 0.25 and sample["absent"]["gpu_util"] == MIG
    # Before the workers answered: the environment names a MIG instance, and the reason says so.
    assert resolve_devices(inventory, visible="MIG-5d1e").reason == MIG


def test_the_inventory_says_which_gpus_are_split_into_mig_instances():
    output = "0, NVIDIA H200, GPU-a, 143771, 570.86.15, Enabled\n1, NVIDIA H200, GPU-b, 143771, 570.86.15, [N/A]\n"
    assert [(g["uuid"], g["mig"]) for g in parse(output)] == [("GPU-a", True), ("GPU-b", False)]


def telemetry(gpu: GpuUtilisation) -> Telemetry:
    return Telemetry(
        requests=RequestLog(),
        batches=BatchLog(),
        admission=Admission(5),
        scraper=EngineScraper(lambda: "http://127.0.0.1:9"),
        gpu=gpu,
        sm=SmActivity(has_gpu=True),
        fragmentation=None,
        degraded=lambda: False,
        engine_restarts=lambda: 0,
    )
