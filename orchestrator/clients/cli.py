"""``lucerna clients``: point the coding agents at a running Lucerna.

::

    lucerna clients [--url http://127.0.0.1:8080] [--model NAME]
        prints, for Codex CLI, Claude Code and OpenCode, the one line that runs it
        against that server (read from its GET /props)
    lucerna clients install [codex|claude-code|opencode ...]
        installs the pinned agents into the cache (npm; once) and prints their paths

Lines go to stdout, notes and progress to stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

import httpx

from orchestrator.clients._config import client_config, context_note
from orchestrator.clients._install import CLIENTS, client_named, ensure_client
from orchestrator.errors import ClientSetupError

__all__ = ["add_clients_parser", "cmd_clients"]

DEFAULT_URL = "http://127.0.0.1:8080"


def progress(message: str) -> None:
    print(f"lucerna clients: {message}", file=sys.stderr, flush=True)


def fetch_props(url: str, model: str | None) -> dict[str, Any]:
    """The server's ``GET /props`` (with ``$LUCERNA_API_KEY``, when set)."""
    key = os.environ.get("LUCERNA_API_KEY", "").strip()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        response = httpx.get(f"{url.rstrip('/')}/props", headers=headers, timeout=10,
                             params={"model": model} if model else None)
    except httpx.HTTPError as exc:
        raise ClientSetupError(f"no Lucerna answers at {url} ({exc}). Start one with "
                               "`bin/lucerna serve`, or give its address with --url") from None
    if response.status_code != 200:
        raise ClientSetupError(f"{url}/props answered {response.status_code}: "
                               f"{response.text[:300]}. Set LUCERNA_API_KEY if the server "
                               "needs a key; check --model")
    return response.json()  # type: ignore[no-any-return]


def cmd_clients(args: argparse.Namespace) -> int:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # no line per request on stderr
    if args.clients_command == "install":
        for name in args.names or [spec.name for spec in CLIENTS]:
            print(f"{name}\t{ensure_client(client_named(name), progress)}")
        return 0
    props = fetch_props(args.url, args.model)
    for spec in CLIENTS:
        print(f"# {spec.title} {spec.version} ({spec.endpoint}); "
              f"install: bin/lucerna clients install {spec.name}")
        print(client_config(spec.name, args.url, props).line())
        note = context_note(spec.name, props)
        if note:
            progress(f"note: {note}")
    return 0


def add_clients_parser(sub: Any) -> None:
    clients = sub.add_parser("clients", help="print the line that points Codex, Claude Code "
                             "and OpenCode at a running Lucerna; `clients install` installs "
                             "them", description=__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    clients.add_argument("--url", default=DEFAULT_URL,
                         help=f"the running server, without /v1 (default {DEFAULT_URL})")
    clients.add_argument("--model", help="the model to use (default: the server's first)")
    actions = clients.add_subparsers(dest="clients_command")
    install = actions.add_parser("install", help="install the pinned agents with npm")
    install.add_argument("names", nargs="*", metavar="NAME",
                         help="codex, claude-code or opencode (default: all three)")
    clients.set_defaults(func=cmd_clients)
