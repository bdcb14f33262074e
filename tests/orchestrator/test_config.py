"""The TOML config: schema, error messages, flag overrides, and the shipped example."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from daemons.native import NativeBuild
from daemons.paths import repo_root
from orchestrator.config import (
    CHAT_MODEL_PATH,
    DEFAULT_MODEL_PATH,
    LucernaConfig,
    Overrides,
    apply_overrides,
    build_models,
    load_config,
    parse_config,
)
from orchestrator.errors import ConfigError
from orchestrator.supervisor import RestartPolicy

EXAMPLE = repo_root() / "configs" / "lucerna.toml"


def write(tmp_path: Path, text: str, name: str = "lucerna.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def config_error(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: "), message  # the file
    assert "Fix: " in message, message  # the fix
    return message


def test_the_shipped_example_loads() -> None:
    config = load_config(EXAMPLE)
    assert config.server.host == "127.0.0.1"
    assert config.server.port == 8080
    assert config.server.api_keys == ()
    assert config.server.cors_origins == ()
    assert [m.name for m in config.models] == ["smollm2-135m-instruct", "gemma3-270m"]
    assert [m.path for m in config.models] == [CHAT_MODEL_PATH, DEFAULT_MODEL_PATH]
    assert config.server.default_model == "smollm2-135m-instruct"
    assert config.models[1].restart == RestartPolicy(max_failures=5, base_delay_s=0.5,
                                                     max_delay_s=30, healthy_after_s=60)


def test_the_examples_second_model_is_valid_once_uncommented(tmp_path: Path) -> None:
    text = EXAMPLE.read_text()
    head, _, tail = text.partition("# A second model behind the same port")
    model = tmp_path / "qwen3-8b.gguf"
    model.write_bytes(b"GGUF")
    uncommented = "\n".join(line[2:] if line.startswith("# ") else line
                            for line in tail.splitlines()[2:])
    uncommented = uncommented.replace("/srv/models/Qwen3-8B-Q4_K_M.gguf", str(model))
    config = load_config(write(tmp_path, head + uncommented))
    assert [m.name for m in config.models] == ["smollm2-135m-instruct", "gemma3-270m",
                                               "qwen3-8b"]
    second = config.models[2]
    assert (second.path, second.n_ctx, second.n_gpu_layers) == (str(model), 8192, -1)
    assert second.env == {"CUDA_VISIBLE_DEVICES": "0"}


def test_every_key_reaches_its_setting(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.gguf").write_bytes(b"GGUF")
    (tmp_path / "keys").write_text("# clients\nkey-one\n\n  key-two  \n")
    config = load_config(write(tmp_path, """
        [server]
        host = "0.0.0.0"
        port = 9000
        api_key_file = "keys"
        cors_origins = ["http://localhost:3000", "https://app.example"]
        shutdown_timeout = 12.5
        max_body_bytes = 4096
        log_level = "debug"
        default_model = "m"
        group_memory_mib = { gpu0 = 512 }
        cache_ram_mib = 64
        kv_cache_dir = "kv"
        kv_cache_dir_mib = 128

        [[models]]
        name = "m"
        path = "models/m.gguf"
        role = "qwen35"
        n_ctx = 512
        threads = 2
        n_gpu_layers = 0
        chunk = 64
        slots = 2
        deterministic = true
        extra_args = ["--seed=7"]
        launcher = ["nice", "-n", "5"]
        env = { A = "1" }
        queue_limit = 3
        max_output_tokens = 100
        load = "on_demand"
        idle = "90s"
        idle_action = "stop"
        group = "gpu0"
        chat_template_file = "models/m.gguf"
        reasoning_effort = "low"
        reasoning_budget = 300

        [models.restart]
        max_failures = 2
        first_delay_s = 0.1
        base_delay_s = 0.2
        max_delay_s = 1
        healthy_after_s = 5
    """))
    server = config.server
    assert (server.host, server.port, server.shutdown_timeout, server.max_body_bytes) == (
        "0.0.0.0", 9000, 12.5, 4096)
    assert server.api_keys == ("key-one", "key-two")
    assert server.cors_origins == ("http://localhost:3000", "https://app.example")
    assert server.log_level == "DEBUG"
    assert (server.default_model, server.group_memory_mib) == ("m", {"gpu0": 512})
    assert (server.cache_ram_mib, server.kv_cache_dir, server.kv_cache_dir_mib) == (
        64, str(tmp_path / "kv"), 128)
    (model,) = config.models
    assert model.path == str(tmp_path / "models" / "m.gguf")  # relative to the file
    assert (model.role, model.n_ctx, model.threads, model.n_gpu_layers, model.chunk,
            model.slots) == ("qwen35", 512, 2, 0, 64, 2)
    assert model.deterministic is True
    assert model.extra_args == ("--seed=7",)
    assert model.launcher == ("nice", "-n", "5")
    assert model.env == {"A": "1"}
    assert (model.queue_limit, model.max_output_tokens) == (3, 100)
    assert (model.load, model.idle_s, model.idle_action, model.group) == (
        "on_demand", 90.0, "stop", "gpu0")
    assert (model.chat_template_file, model.reasoning_effort, model.reasoning_budget) == (
        str(tmp_path / "models" / "m.gguf"), "low", 300)
    assert model.restart == RestartPolicy(first_delay_s=0.1, base_delay_s=0.2, max_delay_s=1,
                                          max_failures=2, healthy_after_s=5)


MODEL = '[[models]]\nname = "m"\npath = "default"\n'


@pytest.mark.parametrize(("text", "key", "words"), [
    (MODEL + "n_cxt = 4096\n", "models[0] (m).n_cxt", "did you mean 'n_ctx'"),
    (MODEL + 'n_ctx = "4k"\n', "models[0] (m).n_ctx", "expected an integer >= 16"),
    (MODEL + "n_ctx = true\n", "models[0] (m).n_ctx", "expected an integer"),
    (MODEL + "queue_limit = -1\n", "models[0] (m).queue_limit", ">= 0"),
    (MODEL + 'deterministic = "on"\n', "models[0] (m).deterministic", "expected true or false"),
    (MODEL + 'role = "pflash"\n', "models[0] (m).role", "not a target daemon role"),
    (MODEL + "extra_args = \"--seed=1\"\n", "models[0] (m).extra_args", "list of"),
    (MODEL + "env = { A = 1 }\n", "models[0] (m).env", "must be a string"),
    (MODEL + "restart = { max_failure = 3 }\n", "models[0] (m).restart.max_failure",
     "did you mean 'max_failures'"),
    (MODEL + "restart = { base_delay_s = 5, max_delay_s = 1 }\n",
     "models[0] (m).restart.max_delay_s", "below base_delay_s"),
    ('[[models]]\nname = "m"\npath = "nowhere.gguf"\n', "models[0] (m).path", "is not a file"),
    ('[[models]]\npath = "default"\n', "models[0].name", "is required"),
    ('[[models]]\nname = "m"\n', "models[0] (m).path", "is required"),
    (MODEL + MODEL, "models[1].name", "already the name"),
    ("[server]\nport = 8080\n", "models", "no model is configured"),
    ('models = "m"\n', "models", "array of tables"),
    ("[server]\nport = 70000\n" + MODEL, "server.port", "in [0, 65535]"),
    ('[server]\napi_key = "a"\napi_key_file = "k"\n' + MODEL, "server.api_key", "both set"),
    ('[server]\napi_key_file = "missing"\n' + MODEL, "server.api_key_file", "cannot read"),
    ('[server]\ncors_origins = ["http://x.test/"]\n' + MODEL, "server.cors_origins",
     "not an origin"),
    ('[server]\nlog_level = "loud"\n' + MODEL, "server.log_level", "unknown level"),
    ("[server]\nhots = \"::1\"\n" + MODEL, "server.hots", "did you mean 'host'"),
    ("[serve]\n" + MODEL, "serve", "unknown key"),
    ('[server]\ndefault_model = "mm"\n' + MODEL, "server.default_model", "did you mean 'm'"),
    ("[server]\ngroup_memory_mib = { default = 0 }\n" + MODEL, "server.group_memory_mib",
     "positive integer"),
    ("[server]\ncache_ram_mib = -1\n" + MODEL, "server.cache_ram_mib", "prefix cache's host RAM"),
    ("[server]\nkv_cache_dir_mib = \"lots\"\n" + MODEL, "server.kv_cache_dir_mib", "disk budget"),
    (MODEL + 'load = "lazy"\n', "models[0] (m).load", "unknown mode"),
    (MODEL + 'idle = "soon"\n', "models[0] (m).idle", "not a duration"),
    (MODEL + 'idle = "-5s"\n', "models[0] (m).idle", "not a positive duration"),
    (MODEL + 'idle_action = "sleep"\n', "models[0] (m).idle_action", "unknown action"),
    (MODEL + 'reasoning_effort = "max"\n', "models[0] (m).reasoning_effort", "unknown effort"),
    (MODEL + "reasoning_budget = -1\n", "models[0] (m).reasoning_budget", ">= 0"),
    (MODEL + 'chat_template_file = "no.jinja"\n', "models[0] (m).chat_template_file",
     "is not a file"),
])
def test_mistakes_name_the_file_the_key_and_the_fix(
    tmp_path: Path, text: str, key: str, words: str,
) -> None:
    message = config_error(tmp_path, text)
    assert f": {key}: " in message, message
    assert words in message, message


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    assert "not valid TOML" in config_error(tmp_path, "[server\nport = 1\n")
    with pytest.raises(ConfigError, match=r"cannot read the config file.*Fix: "):
        load_config(tmp_path / "absent.toml")


def config_of(*names_and_paths: tuple[str, str]) -> LucernaConfig:
    return parse_config({"models": [{"name": n, "path": p, "n_ctx": 1024, "threads": 3}
                                    for n, p in names_and_paths]}, source="lucerna.toml")


def test_without_a_file_the_flags_make_the_default_models_or_one(tmp_path: Path) -> None:
    plain = apply_overrides(None, Overrides())  # both embedded models, the chat one default
    assert [(m.name, m.path, m.n_ctx) for m in plain.models] == [
        ("smollm2-135m-instruct", CHAT_MODEL_PATH, 4096),
        ("gemma3-270m", DEFAULT_MODEL_PATH, 4096)]
    assert plain.server.default_model == "smollm2-135m-instruct"
    assert plain.server.host == "127.0.0.1"
    model = write(tmp_path, "", "tiny.gguf")
    given = apply_overrides(None, Overrides(model=str(model), port=9, n_ctx=256))
    assert [(m.name, m.path, m.n_ctx) for m in given.models] == [("tiny", str(model), 256)]
    assert given.server.port == 9
    named = apply_overrides(None, Overrides(model_name="lamp"))
    assert [m.name for m in named.models] == ["lamp"]


def test_with_a_file_model_flags_add_or_replace_by_name(tmp_path: Path) -> None:
    base = config_of(("a", DEFAULT_MODEL_PATH))
    extra = write(tmp_path, "", "b.gguf")
    added = apply_overrides(base, Overrides(model=str(extra)))
    assert [(m.name, m.path) for m in added.models] == [("a", DEFAULT_MODEL_PATH),
                                                         ("b", str(extra))]
    assert added.models[1].threads is None  # an added model has no file settings
    replaced = apply_overrides(base, Overrides(model=str(extra), model_name="a"))
    assert [(m.name, m.path, m.n_ctx, m.threads) for m in replaced.models] == [
        ("a", str(extra), 1024, 3)]  # the path changes; the file's other settings stay
    with pytest.raises(ConfigError, match="--model-name 'a' was given with --config"):
        apply_overrides(base, Overrides(model_name="a"))


def test_per_model_and_server_flags_override_the_file() -> None:
    base = config_of(("a", DEFAULT_MODEL_PATH), ("b", DEFAULT_MODEL_PATH))
    config = apply_overrides(base, Overrides(
        host="0.0.0.0", port=1234, api_keys=("k",), shutdown_timeout=3, max_body_bytes=2048,
        n_ctx=512, queue_limit=1, max_output_tokens=9, restart_max_failures=2,
        deterministic=True))
    assert (config.server.host, config.server.port, config.server.api_keys,
            config.server.shutdown_timeout, config.server.max_body_bytes) == (
        "0.0.0.0", 1234, ("k",), 3, 2048)
    for model in config.models:
        assert (model.n_ctx, model.threads, model.queue_limit, model.max_output_tokens,
                model.restart.max_failures, model.deterministic) == (512, 3, 1, 9, 2, True)


@pytest.mark.parametrize(("flags", "flag"), [
    (Overrides(n_ctx=4), "--n-ctx"), (Overrides(port=-1), "--port"),
    (Overrides(port=70000), "--port"), (Overrides(queue_limit=-2), "--queue-limit"),
    (Overrides(shutdown_timeout=-1.0), "--shutdown-timeout"),
    (Overrides(cache_ram_mib=-1), "--cache-ram"),
    (Overrides(kv_cache_dir_mib=-5), "--kv-cache-dir-mib"),
])
def test_bad_flag_values_are_refused(flags: Overrides, flag: str) -> None:
    with pytest.raises(ConfigError, match=f"^{flag}: .*Fix: "):
        apply_overrides(None, flags)


def test_models_get_their_daemon_and_roles_must_fit(
    native: NativeBuild, test_models: dict[str, Path],
) -> None:
    qwen3 = str(test_models["qwen3"])
    config = parse_config({"models": [{"name": "q", "path": qwen3, "launcher": ["nice"],
                                       "env": {"A": "1"}, "max_output_tokens": 5,
                                       "deterministic": True}]})
    (model,) = build_models(config, native)
    assert model.launch.role.name == "qwen35"
    assert model.launch.executable == native.binary("qwen35")
    argv = model.launch.argv(stream_fd=None)
    assert argv[:2] == ["nice", str(native.binary("qwen35"))]
    assert "--deterministic=on" in argv
    assert model.launch.env == {"A": "1"}
    assert model.max_output_tokens == 5
    wrong = parse_config({"models": [{"name": "q", "path": qwen3, "role": "laguna"}]},
                         source="x.toml")
    with pytest.raises(ConfigError, match=r"^x.toml: models\[0\] \(q\).role: the laguna "
                                          r"daemon does not serve GGUF architecture 'qwen3'"):
        build_models(wrong, native)


def test_serve_reports_a_bad_config_and_exits_1(tmp_path: Path) -> None:
    path = write(tmp_path, MODEL + "n_cxt = 1\n")
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "serve", "--config", str(path)],
        cwd=repo_root(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"lucerna: error: {path}: models[0] (m).n_cxt: unknown key" in result.stderr
