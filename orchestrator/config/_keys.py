"""Every key of the config file, declared once (``orchestrator.settings.Setting``).

A class per table (``ServerKeys``, ``HostKeys``, ``ModelKeys``, ``RestartKeys``) holds
its keys.

Each declaration is the one source of its key's type, bounds or choices, default, fix
and flag: the validator (``_load``), the ``lucerna serve`` flags (``_overrides``), the
flag checks and the help text with its default all read it, and the settings
dataclasses (``_schema``) take their defaults from it.
"""

from __future__ import annotations

from daemons.engine import BACKENDS
from daemons.roles import ROLES
from orchestrator.api._http import MAX_BODY_BYTES
from orchestrator.keepalive import DEFAULT_KEEPALIVE_INTERVAL_S
from orchestrator.reasoning import EFFORT_BUDGETS
from orchestrator.settings import (
    N_CTX,
    N_GPU_LAYERS,
    PARALLEL,
    QUEUE_LIMIT,
    SPARE_SEQUENCES,
    THREADS,
    Setting,
)
from orchestrator.supervisor import RestartPolicy

__all__ = [
    "BACKENDS",
    "CHAT_MODEL_PATH",
    "DEFAULT_MODEL_PATH",
    "HostKeys",
    "LOG_LEVELS",
    "TARGET_ROLES",
    "ModelKeys",
    "RestartKeys",
    "ServerKeys",
    "ShardKeys",
]

DEFAULT_MODEL_PATH = "default"
"""The ``path`` that names the embedded gemma3-270m (assembled on first use)."""
CHAT_MODEL_PATH = "default-chat"
"""The ``path`` that names the embedded SmolLM2-135M-Instruct (fetched on first use)."""

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_RESTART = RestartPolicy()
TARGET_ROLES = tuple(sorted(name for name, spec in ROLES.items() if spec.is_target))


class ServerKeys:
    """The ``[server]`` table."""

    HOST = Setting("host", str, 'write an address such as "127.0.0.1" (loopback) or '
                   '"0.0.0.0" (every interface; set an api_key then)', default="127.0.0.1",
                   flag="--host", help="address to listen on")
    PORT = Setting("port", int, "use a TCP port such as 8080", default=8080, low=0,
                   high=65535, flag="--port", help="port to listen on")
    API_KEY = Setting("api_key", str, "write the key as a string, or use api_key_file")
    API_KEY_FILE = Setting(
        "api_key_file", str, "write the path of a file holding one key per line",
        shown="$LUCERNA_API_KEY, else no key is needed", flag="--api-key-file",
        help="file with the accepted API keys, one per line")
    CORS_ORIGINS = Setting("cors_origins", list,
                           'list origins such as ["http://localhost:3000"]')
    SHUTDOWN_TIMEOUT = Setting("shutdown_timeout", float,
                               "give the drain budget in seconds, e.g. 30", default=30.0,
                               low=0, flag="--shutdown-timeout",
                               help="seconds to drain in-flight requests on SIGTERM")
    MAX_BODY_BYTES = Setting("max_body_bytes", int,
                             "give the largest request body in bytes, e.g. 33554432 (32 MiB)",
                             default=MAX_BODY_BYTES, low=1024, flag="--max-body-bytes",
                             help="largest request body accepted in bytes, else 413")
    KEEPALIVE_INTERVAL = Setting(
        "keepalive_interval", float,
        "give seconds between keep-alives of a silent stream, e.g. 15 (0: none)",
        default=DEFAULT_KEEPALIVE_INTERVAL_S, low=0, flag="--keepalive-interval",
        help="seconds a stream may stay silent (a long prefill) before it sends a "
        "keep-alive event; 0: none")
    LOG_LEVEL = Setting("log_level", str, f"use one of {', '.join(LOG_LEVELS)}")
    CACHE_RAM_MIB = Setting(
        "cache_ram_mib", int, "give the prefix cache's host RAM in MiB, e.g. 4096 (0: off)",
        shown="a quarter of available memory, at most 8192; 0: no prefix cache", low=0,
        flag="--cache-ram", metavar="MIB",
        help="host RAM for the prefix cache in MiB, shared by the models")
    KV_CACHE_DIR = Setting("kv_cache_dir", str, 'give a directory, e.g. "~/.cache/lucerna/kv"',
                           shown="none, RAM only", flag="--kv-cache-dir", metavar="DIR",
                           help="keep prefix-cache snapshots in DIR across restarts")
    KV_CACHE_DIR_MIB = Setting("kv_cache_dir_mib", int,
                               "give the disk budget in MiB, e.g. 16384 (0: no limit)",
                               default=0, low=0, flag="--kv-cache-dir-mib", metavar="MIB",
                               help="disk budget of --kv-cache-dir; 0: no limit")
    DEFAULT_MODEL = Setting("default_model", str, "name one of the [[models]]")
    GROUP_MEMORY_MIB = Setting("group_memory_mib", dict,
                               "write group_memory_mib = { default = 8192 }")


class HostKeys:
    """One ``[[hosts]]`` table: a machine that runs daemons, reached through a launcher."""

    NAME = Setting("name", str, 'name the host as models will, e.g. name = "strix"')
    LAUNCHER = Setting("launcher", list, 'list the command that runs a command there, e.g. '
                       '["ssh", "-o", "BatchMode=yes", "strix.lan"]')
    BACKEND = Setting("backend", str, f"use the backend that host's daemons were built for: "
                      f"{', '.join(BACKENDS)}", default="cpu", choices=BACKENDS, noun="backend")
    DAEMON_DIR = Setting("daemon_dir", str, 'give the directory of the lucerna-<role> '
                         'executables on that host, e.g. "/opt/lucerna/build/native-cuda/bin"',
                         shown="<checkout>/build/native-<backend>/bin")
    CHECKOUT = Setting("checkout", str, 'give the Lucerna checkout on that host, e.g. '
                       '"/opt/lucerna" (its daemons are built with LUCERNA_BACKEND=<backend>)',
                       shown="this machine's checkout path")
    MODEL_DIR = Setting("model_dir", str, 'give the directory of the model files on that '
                        'host, e.g. "/srv/models"', shown="the local copy's directory")
    SCRATCH_DIR = Setting("scratch_dir", str, 'give a directory on that host the daemons may '
                          'write files to (piece tables, embeddings), e.g. "/tmp"',
                          default="/tmp")
    REMOTE_SHELL = Setting("remote_shell", bool, "write true when the launcher hands a shell "
                           "line to the host (ssh), false when it takes argv words "
                           "(ip netns exec)", default=True)
    LINK_TIMEOUT = Setting("link_timeout", str, 'write a duration such as "5s": nothing '
                           "heard from a daemon there this long means the link is gone",
                           default="5s")
    KEEPALIVE = Setting("keepalive", str, 'write a duration such as "1s": how often a '
                        "daemon there writes a keep-alive", default="1s")


class ModelKeys:
    """One ``[[models]]`` table."""

    NAME = Setting("name", str, 'name the model as clients will, e.g. name = "qwen3-8b"',
                   shown="gemma3-270m, smollm2-135m-instruct, or the file's stem",
                   flag="--model-name", dest="model_name",
                   help="name clients use in the `model` field")
    PATH = Setting(
        "path", str, 'point it at a GGUF model file (relative paths are relative to the '
        'config file), or write "default" for the embedded gemma3-270m ("default-chat": '
        'SmolLM2-135M-Instruct)', shown="both embedded models, the chat one the default",
        flag="--model", dest="model",
        flag_fix='give a GGUF model file, or "default" for the embedded gemma3-270m',
        help="GGUF file to serve alone, or 'default' (the embedded "
        "gemma3-270m) or 'default-chat' (SmolLM2-135M-Instruct); with --config it adds a "
        "model, or replaces the path of the one named --model-name")
    ROLE = Setting("role", str, f"use a target role: {', '.join(TARGET_ROLES)}, or leave it "
                   "out to choose by the model's architecture")
    N_CTX = N_CTX
    THREADS = THREADS
    N_GPU_LAYERS = N_GPU_LAYERS
    CHUNK = Setting("chunk", int, "give the prefill chunk in tokens, e.g. chunk = 512", low=1)
    SLOTS = Setting("slots", int, "give the number of snapshot slots, e.g. slots = 4", low=0)
    DRAFT = Setting(
        "draft", str, "point it at a DFlash draft GGUF matched to this model (relative paths "
        "are relative to the config file), or leave draft out to decode without speculation",
        shown="none", flag="--draft", flag_fix="give a DFlash draft GGUF matched to the "
        "model, or leave --draft out", help="DFlash draft GGUF for speculative decoding "
        "(qwen35 daemon); every generation then drafts and verifies")
    DRAFT_BLOCK_SIZE = Setting("draft_block_size", int, "give the tokens per verify step, "
                               "e.g. 16, or leave it out for the draft's own block size",
                               low=2, high=64)
    DRAFT_TREE = Setting(
        "draft_tree", int, "give the most proposals a tree verify step holds, e.g. "
        "draft_tree = 22, or 0 for chain verify", default=0, shown="0 (chain verify)",
        low=0, high=1008, flag="--draft-tree", metavar="N",
        flag_fix="give the most proposals a tree verify step holds, e.g. 22, or 0",
        help="tree verify (DDTree) for the draft's proposals: each step verifies a "
        "best-first tree of at most N of them instead of a chain (docs/dflash.md says "
        "when it pays); needs --draft and one sequence")
    DRAFT_TREE_BRANCHES = Setting(
        "draft_tree_branches", int, "give the most branches (root-to-leaf paths) of a "
        "tree verify step, e.g. draft_tree_branches = 4, or leave it out for the daemon's 8",
        low=1, high=16)
    DETERMINISTIC = Setting(
        "deterministic", bool, "write deterministic = true for batch-invariant decoding "
        "(greedy tokens the same however requests are batched, chunked, restored or "
        "speculated), or false for the engine's fastest kernels", default=False,
        shown="off", flag="--deterministic",
        help="batch-invariant decoding: every kernel computes a token's row the same way "
        "whatever the batch, so greedy output does not depend on batching, prefill chunks, "
        "prefix-cache restores or speculative decoding (docs/deterministic.md gives the cost)")
    LOOKUP = Setting(
        "lookup", str, 'write "off", "opt-in" (a request may ask for it with "lookup": true) '
        'or "on" (every request unless it says "lookup": false)', default="off",
        choices=("off", "opt-in", "on"), noun="mode", flag="--lookup",
        help="prompt lookup: speculative decoding with proposals from the context itself "
        "(any target, no draft); off, opt-in (per request) or on (per request opt-out)")
    EXTRA_ARGS = Setting("extra_args", list, 'list extra daemon flags, e.g. ["--seed=1"]')
    LAUNCHER = Setting("launcher", list, 'list the command to prefix, e.g. ["ip", "netns", '
                       '"exec", "gpu"]; for another machine use a [[hosts]] entry and host')
    HOST = Setting("host", str, "name one of the [[hosts]], or leave host out to run the "
                   "daemon on this machine")
    ENV = Setting("env", dict, 'write env = { NAME = "value" }')
    SHARDS = Setting("shards", list, 'list [[shards]] by name, e.g. shards = ["experts"]: '
                     "their devices are RPC0, RPC1, ... in that order (--rpc)")
    OVERRIDE_TENSOR = Setting("override_tensor", list, 'list REGEX=DEVICE placements, e.g. '
                              '["ffn_.*_exps=RPC0"] (experts) or ["blk\\\\.1\\\\.=RPC0"] '
                              "(layer 1) (--override-tensor)")
    QUEUE_LIMIT = QUEUE_LIMIT
    PARALLEL = PARALLEL
    SPARE_SEQUENCES = SPARE_SEQUENCES
    MAX_OUTPUT_TOKENS = Setting(
        "max_output_tokens", int, "give a per-request cap in tokens, or leave it out for a "
        "quarter of the context", shown="a quarter of the context", low=1,
        flag="--max-output-tokens", help="cap on tokens generated per request, whatever it "
        "asks")
    LOAD = Setting("load", str, 'write load = "boot" (start with the server) or "on_demand"',
                   default="boot", choices=("boot", "on_demand"), noun="mode")
    IDLE = Setting("idle", str, 'write a duration such as "90s", "10m" or "1h"')
    IDLE_ACTION = Setting("idle_action", str, 'write "park" (release memory, keep the process '
                          'and its caches) or "stop" (end the daemon)', default="park",
                          choices=("park", "stop"), noun="action")
    GROUP = Setting("group", str, 'name the group of models that share a device, e.g. "gpu0"',
                    default="default")
    CHAT_TEMPLATE_FILE = Setting(
        "chat_template_file", str, "point it at a Jinja chat template file (relative paths "
        "are relative to the config file), or leave it out for the GGUF's")
    REASONING_EFFORT = Setting("reasoning_effort", str,
                               f"use one of {', '.join(EFFORT_BUDGETS)}",
                               choices=tuple(EFFORT_BUDGETS), noun="effort")
    REASONING_BUDGET = Setting("reasoning_budget", int,
                               "give the reasoning tokens allowed, e.g. 1024 (0: none)", low=0)
    EMBEDDINGS = Setting(
        "embeddings", str, 'write "mean" (the mean of the hidden states) or "last" (the last '
        "token's), or leave it out to serve no embeddings", shown="off; the flag alone: mean",
        choices=("mean", "last"), noun="pooling", flag="--embeddings",
        help="serve POST /v1/embeddings: each input's hidden states pooled (mean or last "
        "token)")
    RESTART = Setting("restart", dict, "write restart = { max_failures = 5 }")
    PREFILL = Setting("prefill", dict, 'write [models.prefill] with drafter = "default"')


class ShardKeys:
    """One ``[[shards]]`` table: a ds4_shard daemon serving its device over ggml RPC."""

    NAME = Setting("name", str, 'name the shard as models will, e.g. name = "experts"')
    PATH = Setting("path", str, "point it at the deepseek4 GGUF the shard is started with "
                   "(a local copy; relative paths are relative to the config file)")
    HOST = Setting("host", str, "name one of the [[hosts]], or leave host out to run the "
                   "shard on this machine")
    LISTEN = Setting("listen", str, 'give the HOST:PORT its RPC server listens on, as the '
                     'targets dial it, e.g. "10.0.0.2:50052"')
    THREADS = THREADS
    EXTRA_ARGS = ModelKeys.EXTRA_ARGS


class RestartKeys:
    """A model's ``restart`` table (``RestartPolicy``)."""

    MAX_FAILURES = Setting(
        "max_failures", int, "give the failures in a row after which the server exits, e.g. 5",
        default=_RESTART.max_failures, low=1, flag="--restart-max-failures",
        dest="restart_max_failures",
        help="consecutive daemon failures after which the server exits non-zero")
    FIRST_DELAY_S = Setting("first_delay_s", float, "give seconds, e.g. 0 (restart at once)",
                            default=_RESTART.first_delay_s, low=0)
    BASE_DELAY_S = Setting("base_delay_s", float, "give seconds, e.g. 0.5",
                           default=_RESTART.base_delay_s, low=0)
    MAX_DELAY_S = Setting("max_delay_s", float, "give seconds, e.g. 30",
                          default=_RESTART.max_delay_s, low=0)
    HEALTHY_AFTER_S = Setting("healthy_after_s", float, "give seconds, e.g. 60",
                              default=_RESTART.healthy_after_s, low=0)
