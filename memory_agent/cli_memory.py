"""`memory-agent search | store | list | show | forget | export`: a client of the HTTP API.

Exit codes: 0 ok, 1 not found, 2 usage (bad option or input the API refused), 3 auth
(missing/unknown key, or the key may not act for that user), 4 server error or unreachable.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import click

from memory_agent.api_client import ApiError, Connection, MemoryApi
from core.settings import get_settings

OK, NOT_FOUND, USAGE, AUTH, SERVER = 0, 1, 2, 3, 4
EXIT_CODES = f"""
\b
Exit status: {OK} ok, {NOT_FOUND} not found, {USAGE} usage (bad option, or input the API refused),
{AUTH} auth (missing or unknown key, or not allowed for that user), {SERVER} server error or API unreachable.
"""
KINDS = ("fact", "chunk", "message")
MEMORY_TYPES = ("decision", "insight", "fact", "preference", "project", "conversation", "general")


def exit_code(status: int) -> int:
    """The exit status for an API answer (0: the API could not be reached)."""
    if status == 404:
        return NOT_FOUND
    if status in (401, 403):
        return AUTH
    if status in (400, 413, 422):
        return USAGE
    return SERVER


def _connection_options(command: Callable, *, with_json: bool = True) -> Callable:
    """--url, --api-key, --user (and --json) on every memory command."""
    options = [
        click.option("--url", envvar="MEMORY_CLIENT__URL", metavar="URL",
                     help="API base URL (default: MEMORY_CLIENT__URL, else http://MEMORY_API__HOST:MEMORY_API__PORT)."),
        click.option("--api-key", envvar="MEMORY_CLIENT__API_KEY", metavar="KEY",
                     help="API key: selects the tenant (default: MEMORY_CLIENT__API_KEY, else the first configured"
                          " API key, dev-key in development)."),
        click.option("--user", envvar="MEMORY_CLIENT__USER", metavar="USER",
                     help="Acting user for a service key (X-User-Id; default: MEMORY_CLIENT__USER). A key bound to"
                          " a user needs none."),
    ]
    if with_json:
        options.append(click.option("--json", "as_json", is_flag=True,
                                    help="Print the API's JSON answer instead of a table."))
    for option in reversed(options):
        command = option(command)
    return command


def _run(work: Callable[[MemoryApi], Coroutine[Any, Any, Any]], url: str | None, api_key: str | None,
         user: str | None) -> Any:
    """Run one API call; an ApiError ends the command with its exit status and the API's message."""
    connection = Connection.from_settings(get_settings(), url=url, api_key=api_key, user=user)

    async def call() -> Any:
        async with MemoryApi(connection) as api:
            return await work(api)

    try:
        return asyncio.run(call())
    except ApiError as exc:
        where = "unreachable" if exc.status == 0 else f"HTTP {exc.status}"
        click.echo(f"error ({where}): {exc.message}", err=True)
        sys.exit(exit_code(exc.status))


def _print_json(body: Any) -> None:
    click.echo(json.dumps(body, indent=2, ensure_ascii=False, default=str))


def _cut(text: str | None, width: int) -> str:
    return textwrap.shorten(" ".join((text or "").split()), width=width, placeholder="…") if text else ""


def table(rows: list[list[str]], headers: list[str]) -> str:
    """Plain aligned columns (the last one is not padded)."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


def memory_command(name: str) -> Callable:
    """A command of the memory group with the connection options and the exit-code epilog."""
    def decorate(fn: Callable) -> Callable:
        return click.command(name, epilog=EXIT_CODES)(_connection_options(fn))
    return decorate


@memory_command("search")
@click.argument("query")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(KINDS),
              help="Only this kind of memory (repeatable; default: every kind).")
@click.option("--subject", metavar="SUBJECT", help="Only memory about this subject (default: every subject).")
@click.option("--since", metavar="TIME", help="Only items whose source happened at or after this ISO 8601 time.")
@click.option("--until", metavar="TIME", help="Only items whose source happened at or before this ISO 8601 time.")
@click.option("-k", "--limit", "k", type=click.IntRange(1, 50), default=10, show_default=True,
              help="How many items to show.")
@click.option("--why", is_flag=True, help="Also list the best candidates under the threshold.")
def search(query: str, kinds: tuple[str, ...], subject: str | None, since: str | None, until: str | None, k: int,
           why: bool, url: str | None, api_key: str | None, user: str | None, as_json: bool) -> None:
    """Search memory by meaning (facts, conversation chunks, messages), scored like the
    turn-start context: final = similarity x importance weight x recency weight."""
    body = _run(lambda api: api.search(query, kinds=list(kinds) or None, subject_id=subject, since=since,
                                       until=until, k=k), url, api_key, user)
    if as_json:
        _print_json(body)
        return
    rows = [[str(n), f"{i['score']['final']:.3f}",
             f"{i['score']['similarity']:.2f}x{i['score']['importance_weight']:.2f}x{i['score']['recency_weight']:.2f}",
             i["kind"], _cut(i["id"], 40), _cut(i["content"], 70)] for n, i in enumerate(body["items"], 1)]
    click.echo(table(rows, ["#", "score", "sim x imp x rec", "kind", "id", "content"]) if rows else
               f"nothing above the threshold ({body['threshold']}) for {query!r}")
    click.echo(f"\n{body['matched']} above threshold {body['threshold']}, {body['candidates']} candidates;"
               f" user {body['user_id']}, model {body['embedding_model']}")
    if why and body["excluded"]:
        click.echo("\nunder the threshold:")
        click.echo(table([[f"{e['score']['final']:.3f}" if e.get("score") else "-", e["kind"], _cut(e["id"], 40),
                           e["reason"]] for e in body["excluded"]], ["score", "kind", "id", "reason"]))


@memory_command("store")
@click.argument("content")
@click.option("--category", default="other", show_default=True, help="A label, e.g. infrastructure, preference.")
@click.option("--type", "memory_type", type=click.Choice(MEMORY_TYPES), default="general", show_default=True,
              help="Seed 001's memory type.")
@click.option("--importance", type=click.IntRange(1, 5), default=3, show_default=True,
              help="1 (trivial) to 5 (critical).")
@click.option("--tag", "tags", multiple=True, metavar="TAG", help="A tag (repeatable).")
@click.option("--shared", is_flag=True, help="Share with the subject's other users (needs --subject).")
@click.option("--subject", metavar="SUBJECT", help="Who or what the memory is about.")
@click.option("--no-wait", is_flag=True, help="Return once the log has it, without waiting for the projection.")
def store(content: str, category: str, memory_type: str, importance: int, tags: tuple[str, ...], shared: bool,
          subject: str | None, no_wait: bool, url: str | None, api_key: str | None, user: str | None,
          as_json: bool) -> None:
    """Store a memory by hand. It is appended to the log as an event, then merged into a
    near-identical memory or stored as a new one (dedup, seed 001)."""
    if shared and subject is None:
        raise click.UsageError("--shared needs --subject: memory is shared per subject (seed 003)")
    body = _run(lambda api: api.store(content, category=category, memory_type=memory_type, importance=importance,
                                      tags=list(tags), visibility="shared" if shared else "private",
                                      subject_id=subject, wait=not no_wait), url, api_key, user)
    if as_json:
        _print_json(body)
    elif body["outcome"] == "merged":
        click.echo(f"merged into {body['stored_as']} (a near-identical memory; event {body['event_id']})")
    elif body["projected"]:
        click.echo(f"stored {body['stored_as']} (event {body['event_id']})")
    else:
        click.echo(f"accepted {body['fact_id']} (event {body['event_id']}); not searchable yet")


@memory_command("list")
@click.option("--subject", metavar="SUBJECT", help="Only memory about this subject (default: every subject).")
@click.option("--all-versions", is_flag=True, help="Also superseded versions of my facts.")
def list_cmd(subject: str | None, all_versions: bool, url: str | None, api_key: str | None, user: str | None,
             as_json: bool) -> None:
    """List my facts and the facts others shared with me (seed 003)."""
    body = _run(lambda api: api.list_memories(subject_id=subject, include_superseded=all_versions),
                url, api_key, user)
    if as_json:
        _print_json(body)
        return
    rows = [[f["fact_id"], str(f["importance"]), f["category"], f["visibility"] if f["mine"] else
             f"shared by {f['owner_user_id']}", f["subject_id"] or "-", f["updated_at"][:10], _cut(f["content"], 60)]
            for f in body["facts"]]
    click.echo(table(rows, ["id", "imp", "category", "visibility", "subject", "updated", "content"]) if rows
               else f"no memory for user {body['user_id']}")


@memory_command("show")
@click.argument("fact_id")
def show(fact_id: str, url: str | None, api_key: str | None, user: str | None, as_json: bool) -> None:
    """Show one memory (fact) with its provenance and links."""
    body = _run(lambda api: show_by_prefix(api, fact_id), url, api_key, user)
    if as_json:
        _print_json(body)
        return
    for field in ("fact_id", "content", "category", "memory_type", "importance", "tags", "visibility",
                  "owner_user_id", "subject_id", "source_conversation_id", "source_chunk_id", "source_event_ids",
                  "extracted_by", "access_count", "valid_from", "valid_to", "created_at", "updated_at"):
        value = body.get(field)
        click.echo(f"{field:>22}: {', '.join(value) if isinstance(value, list) else value}")
    for link in body.get("links", []):
        click.echo(f"{'link':>22}: {link['direction']} {link['relationship']} {link['fact_id']}")


async def show_by_prefix(api: MemoryApi, fact_id: str) -> dict:
    """The fact with this id, or with the one id of my facts (every version) that starts with it."""
    try:
        return await api.show(fact_id)
    except ApiError as exc:
        if exc.status != 404:
            raise
        listed = await api.list_memories(include_superseded=True)
        matches = unique_prefix(fact_id, [f["fact_id"] for f in listed["facts"]])
        if len(matches) > 1:
            raise ApiError(422, f"{fact_id!r} is the start of {len(matches)} ids: {', '.join(matches[:5])}"
                                f"{' …' if len(matches) > 5 else ''}; give more of it") from None
        if not matches:
            raise
        return await api.show(matches[0])


def unique_prefix(prefix: str, ids: list[str]) -> list[str]:
    """The ids that start with prefix (no match for an empty one), each once, in order."""
    return list(dict.fromkeys(i for i in ids if prefix and i.startswith(prefix)))


@memory_command("forget")
@click.argument("fact_id")
def forget(fact_id: str, url: str | None, api_key: str | None, user: str | None, as_json: bool) -> None:
    """Delete one of my memories (an event in the log: hidden everywhere, history kept)."""
    body = _run(lambda api: api.forget(fact_id), url, api_key, user)
    if as_json:
        _print_json(body)
    else:
        click.echo(f"forgot {fact_id} (event {body['event_id']})" + ("" if body["projected"] else "; not applied yet"))


def _export(out: Path | None, url: str | None, api_key: str | None, user: str | None, as_json: bool) -> None:
    """Export my memory as JSON Lines (facts with every version, chunks, summaries), each line
    with its provenance: source conversation, message range, event ids, dates. With --json: one
    JSON array of the same objects."""
    async def write(api: MemoryApi) -> int:
        lines = 0
        sink = out.open("wb") if out else sys.stdout.buffer
        try:
            if as_json:
                body = b"".join([chunk async for chunk in api.export()])
                items = [json.loads(line) for line in body.splitlines() if line.strip()]
                sink.write(json.dumps(items, indent=2, ensure_ascii=False).encode() + b"\n")
                return len(items)
            async for chunk in api.export():
                sink.write(chunk)
                lines += chunk.count(b"\n")
        finally:
            if out:
                sink.close()
            else:
                sink.flush()
        return lines

    lines = _run(write, url, api_key, user)
    if out:
        click.echo(f"{lines} {'item(s)' if as_json else 'line(s)'} written to {out}", err=True)


export = click.command("export", epilog=EXIT_CODES)(_connection_options(click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Write to this file (default: standard output).")(_export)))

COMMANDS = (search, store, list_cmd, show, forget, export)


@click.command("mcp")
@click.option("--http", "use_http", is_flag=True,
              help="Serve streamable HTTP (at /mcp) instead of stdio; each request then brings its own key.")
@click.option("--host", default="127.0.0.1", show_default=True, help="With --http: the address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True,
              help="With --http: the port to listen on.")
@click.option("--url", envvar="MEMORY_CLIENT__URL", metavar="URL",
              help="The memory API's base URL (default: MEMORY_CLIENT__URL, else"
                   " http://MEMORY_API__HOST:MEMORY_API__PORT).")
@click.option("--api-key", envvar="MEMORY_CLIENT__API_KEY", metavar="KEY",
              help="stdio: the API key every tool call acts with (default: MEMORY_CLIENT__API_KEY, else the first"
                   " configured API key). Ignored with --http (the X-API-Key or Bearer header of each request).")
@click.option("--user", envvar="MEMORY_CLIENT__USER", metavar="USER",
              help="stdio: the acting user for a service key (default: MEMORY_CLIENT__USER). With --http: the"
                   " X-User-Id header of each request.")
def mcp(use_http: bool, host: str, port: int, url: str | None, api_key: str | None, user: str | None) -> None:
    """Serve the memory as MCP tools: search_memory, store_memory, list_memories, forget_memory,
    get_turn_context. The tenant and user come from the API key (configuration, or the HTTP
    request's headers), never from a tool argument."""
    import logging

    from memory_agent import mcp_server

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per API call otherwise
    connection = Connection.from_settings(get_settings(), url=url, api_key=api_key, user=user)
    if use_http:
        import uvicorn

        click.echo(f"MCP over streamable HTTP at http://{host}:{port}/mcp (memory API {connection.url})", err=True)
        uvicorn.run(mcp_server.http_app(connection.url, timeout_s=connection.timeout_s, host=host), host=host,
                    port=port, log_level="warning")
    else:
        check_acting_user(connection)
        mcp_server.build_server(mcp_server.stdio_connection(connection)).run("stdio")


def check_acting_user(connection: Connection) -> None:
    """Refuse to serve MCP over stdio when no tool call could act: a service key without a user
    (or a key the API refuses). An unreachable API is only reported: it may come up later."""
    async def ask() -> str:
        async with MemoryApi(connection) as api:
            return await api.acting_user()
    try:
        user = asyncio.run(ask())
    except ApiError as exc:
        if exc.status == 0:
            click.echo(f"warning: {exc.message}; tool calls will fail until it answers", err=True)
            return
        click.echo(f"error: memory-agent mcp cannot act for anyone (HTTP {exc.status}): {exc.message}", err=True)
        sys.exit(exit_code(exc.status))
    click.echo(f"MCP over stdio, acting as user {user!r} (memory API {connection.url})", err=True)


COMMANDS = (*COMMANDS, mcp)
