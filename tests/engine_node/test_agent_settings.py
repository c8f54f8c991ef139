"""The agent's start-up settings that guard the node: transport to the control plane, the engine's environment."""

import pytest

from engine_node.engine_env import engine_environment
from engine_node.settings import control_plane_url_problem, from_args


@pytest.mark.parametrize(
    "url",
    [
        "",
        "wss://cp.example.com/ws/agent/",
        "wss://10.0.0.5:8443/ws/agent/",
        "ws://127.0.0.1:8000/ws/agent/",
        "ws://127.8.9.10:8000/ws/agent/",
        "ws://localhost:8000/ws/agent/",
        "ws://[::1]:8000/ws/agent/",
        "ws://0.0.0.0:8000/ws/agent/",
    ],
)
def test_tls_or_loopback_is_accepted(url):
    assert control_plane_url_problem(url, insecure=False) is None


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ws://cp.example.com:8000/ws/agent/", "ws:// to cp.example.com would send the node token"),
        ("ws://10.0.0.5:8000/ws/agent/", "use wss://"),
        ("ws://localhost.attacker.net/ws/agent/", "ws:// to localhost.attacker.net"),
        ("http://127.0.0.1:8000/ws/agent/", "must be a ws:// or wss:// URL"),
        ("cp.example.com", "must be a ws:// or wss:// URL"),
    ],
)
def test_plain_ws_to_another_host_is_refused(url, message):
    assert message in control_plane_url_problem(url, insecure=False)


def test_the_operator_may_allow_plain_ws_explicitly():
    assert control_plane_url_problem("ws://10.0.0.5:8000/ws/agent/", insecure=True) is None
    settings = from_args(
        ["--backend", "simulator", "--control-plane-url", "ws://10.0.0.5:8000/ws/agent/", "--insecure-control-plane"]
    )
    assert settings.insecure_control_plane


def test_model_allow_list_flags_are_read():
    settings = from_args(
        [
            "--backend", "simulator", "--model-dir", "/srv/models", "--model-dir", "/data/models",
            "--allow-model", "Qwen/Qwen3-0.6B", "--allow-trust-remote-code", "--engine-env", "MY_LICENSE_FILE",
        ]
    )  # fmt: skip
    assert [str(d) for d in settings.model_dirs] == ["/srv/models", "/data/models"]
    assert settings.allowed_models == ["Qwen/Qwen3-0.6B"]
    assert settings.allow_trust_remote_code and settings.engine_env == ["MY_LICENSE_FILE"]


def test_the_engine_never_sees_the_agents_secrets():
    environ = {
        "PATH": "/usr/bin",
        "HOME": "/home/vllm",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "VLLM_CPU_KVCACHE_SPACE": "4",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "HF_TOKEN": "hf_operator_choice",
        "HF_HOME": "/data/hf",
        "LD_PRELOAD": "/usr/lib/libtcmalloc.so",
        "ENGINE_NODE_TOKEN": "node-secret",
        "ENGINE_NODE_SESSION_REDIS_URL": "redis://:password@redis:6379/0",
        "DATABASE_URL": "postgres://u:p@db/x",
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "MY_LICENSE_FILE": "/etc/license",
    }
    passed = engine_environment(environ, extra=["MY_LICENSE_FILE", "ENGINE_NODE_TOKEN"])
    assert set(passed) == {
        "PATH", "HOME", "LANG", "LC_ALL", "VLLM_CPU_KVCACHE_SPACE", "CUDA_VISIBLE_DEVICES", "HF_TOKEN", "HF_HOME",
        "LD_PRELOAD", "MY_LICENSE_FILE",
    }  # fmt: skip
    assert "node-secret" not in passed.values()


def test_an_agent_setting_cannot_be_passed_to_the_engine(capsys):
    with pytest.raises(SystemExit):
        from_args(["--backend", "simulator", "--engine-env", "ENGINE_NODE_TOKEN"])
    assert "ENGINE_NODE_TOKEN is the agent's own setting" in capsys.readouterr().err


def test_several_control_plane_urls_are_each_checked(capsys):
    """Processes of one control plane, comma-separated: each URL passes the same check as a single one."""
    urls = " ws://127.0.0.1:8001/ws/agent/ , wss://cp-b.example.com/ws/agent/,ws://127.0.0.1:8001/ws/agent/"
    settings = from_args(["--backend", "simulator", "--control-plane-url", urls])
    assert settings.control_plane_urls == ["ws://127.0.0.1:8001/ws/agent/", "wss://cp-b.example.com/ws/agent/"]
    with pytest.raises(SystemExit):
        from_args(["--backend", "simulator", "--control-plane-url", "wss://a.example.com/ws/agent/,ws://10.0.0.2/"])
    assert "--control-plane-url: ws:// to 10.0.0.2 would send the node token" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        from_args(["--backend", "simulator", "--control-plane-url", " , "])
    assert "--control-plane-url: ' , ' names no URL" in capsys.readouterr().err


def test_the_sample_window_is_read_and_bounded(capsys):
    """Each sample's figures cover the last --sample-window seconds (the control plane checks the same figure)."""
    assert from_args(["--backend", "simulator"]).sample_window_s == 10
    assert from_args(["--backend", "simulator", "--sample-window", "2"]).sample_window_s == 2
    for bad in ("0", "301", "nan"):
        with pytest.raises(SystemExit):
            from_args(["--backend", "simulator", "--sample-window", bad])
        assert "--sample-window (or ENGINE_NODE_SAMPLE_WINDOW_S): expected 1 to 300 seconds" in capsys.readouterr().err
