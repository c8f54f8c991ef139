"""The engine child's environment: an allow-list of what vLLM (or the simulator) needs, never the agent's secrets.

The agent holds the node token (`ENGINE_NODE_TOKEN`), maybe a Redis URL with its password, and whatever else its
supervisor put in its environment. The engine runs model code (a model repository's own code, with
trust_remote_code) and serves unauthenticated dev endpoints on loopback, so it gets only the variables below:
what the C and Python runtimes, PyTorch, CUDA/ROCm, NCCL, Hugging Face and vLLM read, plus proxy and CA
settings for downloads, plus the names the operator adds with `--engine-env`. `HF_TOKEN` passes with the `HF_`
prefix: whether the engine may read gated repositories is the operator's choice, made by setting it or not.
"""

from collections.abc import Iterable, Mapping

# Exact names: the process basics, locale, time zone, temporary files, Python's own switches, CA bundles, proxies.
PASSED_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TERM",
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONWARNINGS",
        "VIRTUAL_ENV",
        "LD_LIBRARY_PATH",
        # vLLM's CPU build recommends preloading tcmalloc and Intel's OpenMP.
        "LD_PRELOAD",
        "XDG_CACHE_HOME",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "DO_NOT_TRACK",
        "CC",
        "CXX",
    }
)
# Prefixes: vLLM, GPU runtimes and collectives, Hugging Face libraries, PyTorch and its compilers, OpenMP/MKL threads.
PASSED_PREFIXES = (
    "LC_",
    "VLLM_",
    "CUDA_",
    "NVIDIA_",
    "NCCL_",
    "CUBLAS_",
    "CUDNN_",
    "HIP_",
    "ROCM_",
    "ROCR_",
    "HSA_",
    "HF_",
    "HUGGINGFACE_",
    "HUGGING_FACE_",
    "TRANSFORMERS_",
    "TOKENIZERS_",
    "SAFETENSORS_",
    "TORCH_",
    "TORCHINDUCTOR_",
    "PYTORCH_",
    "TRITON_",
    "OMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "ONEDNN_",
    "DNNL_",
    # The simulator's own fault injection (engine_node/simulator/README.md).
    "SIMULATOR_",
)
# The agent's own settings, token included, never reach the engine, whatever the allow-list says.
AGENT_PREFIX = "ENGINE_NODE_"


def engine_environment(environ: Mapping[str, str], *, extra: Iterable[str] = ()) -> dict[str, str]:
    """The variables of `environ` the engine may see: the built-in allow-list plus the names in `extra`."""
    wanted = set(extra)
    return {
        name: value
        for name, value in environ.items()
        if not name.startswith(AGENT_PREFIX)
        and (name in PASSED_NAMES or name in wanted or name.startswith(PASSED_PREFIXES))
    }
