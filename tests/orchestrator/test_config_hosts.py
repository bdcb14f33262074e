"""``[[hosts]]`` and a model's ``host``: validation, and the launch a remote model gets."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from daemons.native import NativeBuild
from orchestrator.config import build_models, load_config
from orchestrator.errors import ConfigError

HOST = '''
[[hosts]]
name = "strix"
launcher = ["ssh", "-o", "BatchMode=yes", "strix.lan"]
backend = "hip"
checkout = "/opt/lucerna"
model_dir = "/srv/models"
link_timeout = "4s"
keepalive = "500ms"
'''


def load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "lucerna.toml"
    path.write_text(text)
    return load_config(path)


def error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text)
    return str(caught.value)


def test_a_host_and_a_model_on_it(tmp_path: Path, native: NativeBuild,
                                  default_model: Path) -> None:
    config = load(tmp_path, HOST + f'''
[[models]]
name = "far"
path = "{default_model}"
host = "strix"
env = {{ HIP_VISIBLE_DEVICES = "0" }}
''')
    (host,) = config.hosts
    assert (host.backend, host.link_timeout_s, host.keepalive_s) == ("hip", 4.0, 0.5)
    (model,) = build_models(config, native)
    launch = model.launch
    # The backend picks the host's build; the model is found by name in model_dir.
    assert launch.executable == PurePosixPath("/opt/lucerna/build/native-hip/bin/lucerna-qwen35")
    assert launch.model == PurePosixPath("/srv/models") / default_model.name
    assert (launch.channel, launch.host, launch.keepalive_ms, launch.link_timeout_s) == (
        "stdout", "strix", 500, 4.0)
    argv = launch.argv(stream_fd=None)
    assert argv[:5] == ["ssh", "-o", "BatchMode=yes", "strix.lan", "env"]
    assert argv[5:9] == ["GGML_NO_BACKTRACE=1", "HIP_VISIBLE_DEVICES=0",
                         "/opt/lucerna/build/native-hip/bin/lucerna-qwen35",
                         f"/srv/models/{default_model.name}"]
    assert "--channel=stdout" in argv and "--keepalive-ms=500" in argv
    assert not any(arg.startswith("--stream-fd") for arg in argv)
    # The header was read from the local copy.
    assert model.info.architecture == "gemma3"


@pytest.mark.parametrize(("text", "expected"), [
    ('[[models]]\nname = "m"\npath = "default"\nhost = "strixx"\n' + HOST,
     "'strixx' is not a configured host. Fix: did you mean 'strix'?"),
    (HOST + '[[models]]\nname = "m"\npath = "default"\nhost = "strix"\nlauncher = ["x"]\n',
     "both host and launcher"),
    (HOST.replace('link_timeout = "4s"', 'link_timeout = "0.8s"')
     + '[[models]]\nname = "m"\npath = "default"\n', "less than two keep-alive intervals"),
    (HOST.replace('backend = "hip"', 'backend = "vulkan"')
     + '[[models]]\nname = "m"\npath = "default"\n', "hosts[0] (strix).backend"),
    (HOST.replace('model_dir = "/srv/models"', 'model_dir = "models"')
     + '[[models]]\nname = "m"\npath = "default"\n', "'models' is not an absolute path"),
    (HOST + HOST + '[[models]]\nname = "m"\npath = "default"\n', "already the name"),
])
def test_mistakes_name_the_key_and_the_fix(tmp_path: Path, text: str, expected: str) -> None:
    message = error(tmp_path, text)
    assert expected in message and "Fix:" in message, message


def test_a_target_with_a_shard_on_another_host(tmp_path: Path, native: NativeBuild,
                                               test_models: dict[str, Path]) -> None:
    config = load(tmp_path, HOST + f'''
[[shards]]
name = "experts"
host = "strix"
path = "{test_models["deepseek4"]}"
listen = "10.0.0.2:50052"

[[models]]
name = "ds4"
path = "{test_models["deepseek4"]}"
shards = ["experts"]
override_tensor = ["ffn_.*_exps=RPC0", "blk\\\\.3\\\\.=CPU"]
''')
    (model,) = build_models(config, native)
    (shard,) = model.shards
    assert shard.launch.role.name == "ds4_shard" and shard.launch.host == "strix"
    assert "--rpc-listen=10.0.0.2:50052" in shard.launch.argv(None)
    assert model.launch.host is None  # the target runs here, its experts there
    argv = model.launch.argv(stream_fd=3)
    assert "--rpc=10.0.0.2:50052" in argv
    assert r"--override-tensor=ffn_.*_exps=RPC0,blk\.3\.=CPU" in argv
    assert model.supervisor.needs == (shard,)


@pytest.mark.parametrize(("text", "expected"), [
    ('[[models]]\nname = "m"\npath = "default"\nshards = ["x"]\n', "'x' is not a configured shard"),
    ('[[shards]]\nname = "x"\npath = "lucerna.toml"\nlisten = "nowhere"\n'
     '[[models]]\nname = "m"\npath = "default"\n', "'nowhere' is not HOST:PORT"),
    ('[[models]]\nname = "m"\npath = "default"\noverride_tensor = ["RPC0"]\n',
     "'RPC0' is not REGEX=DEVICE"),
])
def test_shard_mistakes(tmp_path: Path, text: str, expected: str) -> None:
    message = error(tmp_path, text)
    assert expected in message and "Fix:" in message, message


def test_setup_runs_on_each_host_for_its_backend(tmp_path: Path) -> None:
    from orchestrator.config._hosts import host_setup_argv

    config = load(tmp_path, HOST + '[[models]]\nname = "m"\npath = "default"\n')
    assert host_setup_argv(config.hosts[0]) == [
        "ssh", "-o", "BatchMode=yes", "strix.lan",
        "env", "LUCERNA_BACKEND=hip", "/opt/lucerna/bin/lucerna", "setup"]
