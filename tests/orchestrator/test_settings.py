"""Settings declared once: the TOML check, the flag, its check and its help all agree."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from orchestrator.cli import build_parser
from orchestrator.config import (
    ModelKeys,
    ModelSettings,
    Overrides,
    RestartKeys,
    ServerKeys,
    ServerSettings,
    apply_overrides,
    parse_config,
)
from orchestrator.errors import ConfigError
from orchestrator.prefill import PrefillOverrides, PrefillSettings
from orchestrator.prefill._keys import PrefillKeys
from orchestrator.settings import N_CTX, N_GPU_LAYERS, QUEUE_LIMIT, THREADS, Setting, check_flag

TABLES = {"server": ServerKeys, "models": ModelKeys, "restart": RestartKeys,
          "prefill": PrefillKeys}


def declared(keys: type) -> list[Setting]:
    return [value for value in vars(keys).values() if isinstance(value, Setting)]


def subcommand(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    chosen: argparse.ArgumentParser = sub.choices[name]
    return chosen


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings
            if not isinstance(action, argparse._HelpAction)}


def model_table(**keys: object) -> dict[str, object]:
    return {"models": [{"name": "m", "path": "default", **keys}]}


@pytest.mark.parametrize("command", ["serve", "niah"])
def test_every_flag_shows_its_default(command: str) -> None:
    for flag, action in options(subcommand(command)).items():
        if action.nargs == 0 and command == "niah":
            continue  # niah's switches (--park, --no-baseline) are off unless given
        assert action.help and "default" in action.help, flag


def test_declared_flags_show_the_declared_default() -> None:
    serve = options(subcommand("serve"))
    for keys in (ServerKeys, ModelKeys, RestartKeys, PrefillKeys):
        for setting in declared(keys):
            if setting.flag is None or setting.flag not in serve:
                continue
            action = serve[setting.flag]
            assert action.dest == (setting.dest or setting.key), setting.flag
            assert action.default is None, setting.flag  # the config's value stays
            shown = setting.shown or (f"{setting.default:g}" if isinstance(setting.default, float)
                                      else str(setting.default))
            assert action.help is not None and shown in action.help, setting.flag


def test_the_daemon_flags_are_one_declaration_in_every_command() -> None:
    for command in ("serve", "niah", "bench"):
        flags = options(subcommand(command))
        for setting in (N_CTX, THREADS, N_GPU_LAYERS):
            assert setting.flag is not None
            action = flags[setting.flag]
            assert (action.dest, action.type) == (setting.key, int), (command, setting.flag)


def test_dataclass_defaults_are_the_declared_ones() -> None:
    server = ServerSettings()
    for setting in declared(ServerKeys):
        if hasattr(server, setting.key) and setting.default is not None:
            assert getattr(server, setting.key) == setting.default, setting.key
    model = ModelSettings(name="m", path="default")
    for setting in declared(ModelKeys):
        if hasattr(model, setting.key) and setting.default is not None:
            assert getattr(model, setting.key) == setting.default, setting.key
    for setting in declared(RestartKeys):
        assert getattr(model.restart, setting.key) == setting.default, setting.key
    prefill = PrefillSettings()
    assert (prefill.mode, prefill.threshold, prefill.park_target) == (
        PrefillKeys.MODE.default, PrefillKeys.THRESHOLD.default, PrefillKeys.PARK_TARGET.default)
    assert prefill.curve.ratio(1) == PrefillKeys.KEEP.default
    assert (prefill.options.lookahead, prefill.options.chunk, prefill.options.pool) == (
        PrefillKeys.LOOKAHEAD.default, PrefillKeys.CHUNK.default, PrefillKeys.POOL.default)


def _table_with(table: str, key: str, value: object) -> dict[str, object]:
    if table == "server":
        return {"server": {key: value}, **model_table()}
    if table == "restart":
        return model_table(restart={key: value})
    if table == "prefill":
        return model_table(prefill={key: value})
    return model_table(**{key: value})


@pytest.mark.parametrize(("table", "setting"), [
    (table, setting) for table, keys in TABLES.items() for setting in declared(keys)
    if setting.kind in (int, float) and setting.low is not None])
def test_the_file_and_the_flag_refuse_the_same_values(table: str, setting: Setting) -> None:
    assert setting.low is not None
    below = setting.low - 1 if setting.kind is int else setting.low / 2 - 1
    with pytest.raises(ConfigError, match=rf"\.{setting.key}: expected an? "):
        parse_config(_table_with(table, setting.key, below))
    if setting.high is not None:
        with pytest.raises(ConfigError, match=rf"\.{setting.key}: expected an? "):
            parse_config(_table_with(table, setting.key, setting.high + 1))
    if setting.flag is not None:
        with pytest.raises(ConfigError, match=rf"^{setting.flag}: .* below its minimum .*Fix: "):
            check_flag(setting, below)
        check_flag(setting, setting.low)


@pytest.mark.parametrize(("text", "words"), [
    (model_table(path="nowhere.gguf"), r"models\[0\] \(m\)\.path: .*nowhere.gguf is not a file"),
    (model_table(draft="nowhere.gguf"), r"models\[0\] \(m\)\.draft: .*nowhere.gguf is not a file"),
    (model_table(prefill={"drafter": "nowhere.gguf"}),
     r"models\[0\] \(m\)\.prefill\.drafter: .*nowhere.gguf is not a file"),
])
def test_one_file_check_for_every_model_file_key(text: dict[str, object], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_config(text)


@pytest.mark.parametrize(("flags", "flag"), [
    (Overrides(model="nowhere.gguf"), "--model"),
    (Overrides(draft="nowhere.gguf"), "--draft"),
    (Overrides(prefill=PrefillOverrides(drafter="nowhere.gguf")), "--prefill-drafter"),
])
def test_one_file_check_for_every_model_file_flag(flags: Overrides, flag: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{flag}: .*nowhere.gguf is not a file\. Fix: "):
        apply_overrides(None, flags)


def test_files_resolve_against_the_config_file_and_embedded_words_pass(tmp_path: Path) -> None:
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    config = parse_config({"models": [
        {"name": "a", "path": "m.gguf", "draft": "m.gguf", "prefill": {"drafter": "m.gguf"}},
        {"name": "b", "path": "default-chat", "prefill": {"drafter": "default"}},
    ]}, base_dir=tmp_path)
    first, second = config.models
    assert first.path == first.draft == str(tmp_path / "m.gguf")
    assert first.prefill is not None and first.prefill.drafter == str(tmp_path / "m.gguf")
    assert second.path == "default-chat"
    assert second.prefill is not None and second.prefill.drafter == "default"


def test_choices_name_the_unknown_value() -> None:
    for table, keys in TABLES.items():
        for setting in declared(keys):
            if setting.choices:
                with pytest.raises(ConfigError, match=rf"\.{setting.key}: unknown "
                                                      rf"{setting.noun} 'nope'"):
                    parse_config(_table_with(table, setting.key, "nope"))


def test_every_serve_flag_reaches_its_override(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.prefill import prefill_overrides
    from orchestrator.prefill._flags import UPSTREAM_KEY_ENV

    monkeypatch.setenv(UPSTREAM_KEY_ENV, "env-key")  # taken out of the environment

    args = build_parser().parse_args([
        "serve", "--model", "m.gguf", "--model-name", "m", "--host", "::1", "--port", "9",
        "--max-body-bytes", "2048", "--keepalive-interval", "2.5", "--n-ctx", "512",
        "--threads", "2", "--n-gpu-layers", "-1", "--max-output-tokens", "7",
        "--shutdown-timeout", "3", "--queue-limit", "4", "--restart-max-failures", "6",
        "--draft", "d.gguf", "--draft-tree", "22", "--embeddings", "--cache-ram", "64",
        "--kv-cache-dir", "kv", "--kv-cache-dir-mib", "128", "--prefill-compression", "always",
        "--prefill-threshold", "10", "--prefill-keep", "0.2", "--prefill-drafter", "default",
        "--prefill-n-ctx", "1024", "--no-prefill-park", "--prefill-upstream", "http://u/v1",
        "--prefill-upstream-key", "k", "--prefill-upstream-model", "um"])
    flags = Overrides.from_args(args, api_keys=None, prefill=prefill_overrides(args))
    assert flags == Overrides(
        host="::1", port=9, max_body_bytes=2048, keepalive_interval=2.5, model="m.gguf",
        model_name="m", n_ctx=512, threads=2, n_gpu_layers=-1, max_output_tokens=7,
        shutdown_timeout=3.0, queue_limit=4, restart_max_failures=6, draft="d.gguf",
        draft_tree=22, embeddings="mean", cache_ram_mib=64, kv_cache_dir="kv", kv_cache_dir_mib=128,
        prefill=PrefillOverrides(mode="always", threshold=10, keep=0.2, drafter="default",
                                 n_ctx=1024, park_target=False, upstream="http://u/v1",
                                 upstream_key="k", upstream_model="um",
                                 upstream_key_env="env-key"))


def test_bench_passes_the_serve_queue_limit_declaration_on() -> None:
    for command in ("serve", "bench"):
        action = options(subcommand(command))["--queue-limit"]
        assert (action.dest, action.type) == (QUEUE_LIMIT.key, int), command
