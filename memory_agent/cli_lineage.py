"""`memory-agent explain`: where a memory came from, and what the agent knew at a turn
(docs/lineage.md). An HTTP client of the API, with the other client commands' options
(--url/--api-key/--user and their MEMORY_CLIENT__* variables) and exit codes: 0 ok, 1 not
found, 2 usage, 3 auth, 4 server error or unreachable, 5 the turn differs from its record."""

from __future__ import annotations

import json
import sys
from typing import Any
from urllib.parse import quote

import click
import httpx

from domain.lineage import KINDS
from core.settings import get_settings


OK, NOT_FOUND, USAGE, AUTH, SERVER, DIFFERS = 0, 1, 2, 3, 4, 5


def fail(message: str, code: int) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


def exit_code(status: int) -> int:
    return {404: NOT_FOUND, 401: AUTH, 403: AUTH, 400: USAGE, 422: USAGE}.get(status, SERVER)


class Api:
    def __init__(self, url: str, key: str, user: str | None) -> None:
        headers = {"X-API-Key": key} | ({"X-User-Id": user} if user else {})
        self.http = httpx.Client(base_url=url, headers=headers, timeout=30)

    def get(self, path: str, missing_ok: bool = False, **params: Any) -> dict | None:
        try:
            response = self.http.get(path, params={k: v for k, v in params.items() if v is not None})
        except httpx.HTTPError as error:
            fail(f"cannot reach the API at {self.http.base_url}: {error}", SERVER)
        if missing_ok and response.status_code == 404:
            return None
        if response.status_code != 200:
            detail = response.json().get("detail") if "json" in response.headers.get("content-type", "") else None
            if isinstance(detail, dict):
                detail = detail.get("message")
            fail(f"{response.status_code} {path}: {detail or response.text[:300]}", exit_code(response.status_code))
        return response.json()

    def lineage(self, kind: str, item_id: str, missing_ok: bool = False) -> dict | None:
        return self.get(f"/v1/memories/{kind}/{quote(item_id, safe='')}/lineage", missing_ok)


@click.command()
@click.argument("first")
@click.argument("second")
@click.option("--turn", "force_turn", is_flag=True, help="FIRST SECOND are CONVERSATION SEQ even if FIRST is a kind.")
@click.option("--url", "--api-url", "api_url", envvar="MEMORY_CLIENT__URL", metavar="URL",
              help="API base URL (default: MEMORY_CLIENT__URL, else http://MEMORY_API__HOST:MEMORY_API__PORT).")
@click.option("--api-key", envvar="MEMORY_CLIENT__API_KEY", metavar="KEY",
              help="API key (default: MEMORY_CLIENT__API_KEY, else the first configured plain API key).")
@click.option("--user", envvar="MEMORY_CLIENT__USER", metavar="USER",
              help="Acting user for a service key (X-User-Id; default: MEMORY_CLIENT__USER).")
@click.option("--json", "as_json", is_flag=True, help="Print the API's answers as JSON.")
def explain(first: str, second: str, force_turn: bool, api_url: str | None, api_key: str | None, user: str | None,
            as_json: bool) -> None:
    """Explain a memory or a turn.

    \b
    memory-agent explain KIND ID          lineage of a summary, chunk, fact, topic or message
                                          (summary/message ids are CONVERSATION:N)
    memory-agent explain CONVERSATION SEQ what turn SEQ was served, rebuilt and compared with
                                          the record, each item with its lineage
    """
    settings = get_settings()
    url = api_url or f"http://{settings.api.host}:{settings.api.port}"
    key = api_key or next((k for k in settings.api.api_keys if not k.startswith("sha256:")), "")
    api = Api(url, key, user)
    if first in KINDS and not force_turn:
        answer = api.lineage(first, second)
        if first == "fact":
            answer["origin"] = fact_origin(api, answer, user)
        click.echo(json.dumps(answer, indent=2) if as_json else "\n".join(render_lineage(answer)))
        return
    try:
        seq = int(second)
    except ValueError:
        fail(f"SEQ must be a number (or FIRST one of {', '.join(KINDS)})", USAGE)
    context = api.get(f"/v1/conversations/{first}/context", as_of_seq=seq, user_id=user)
    # An item served then may be gone now (deleted, unshared): its lineage is None.
    lineages = {f"{kind}/{item_id}": api.lineage(kind, item_id, missing_ok=True)
                for kind, item_id in turn_items(first, context)}
    if as_json:
        click.echo(json.dumps({"context": context, "lineage": lineages}, indent=2))
    else:
        click.echo("\n".join(render_turn(context, lineages)))
    if context.get("as_of", {}).get("matches") is False:
        sys.exit(DIFFERS)


def fact_origin(api: Api, answer: dict, user: str | None) -> list[dict]:
    """The source messages a fact came from, best first: a fact's sources are its chunk's messages
    (20 by default), so they are ranked by the API's own search with the fact as the query, within
    the time the chunk spans. Empty when the caller may not see the sources."""
    sources = answer.get("sources") or []
    if len(sources) <= 1:
        return sources
    times = sorted(m["occurred_at"] for m in sources)
    found = api.get("/v1/search", missing_ok=True, q=answer["item"]["excerpt"], kinds="message", k=50,
                    since=times[0], until=times[-1],
                    user_id=None if user else answer["item"].get("owner_user_id"))
    return rank_origin(sources, found or {})


def rank_origin(sources: list[dict], search: dict) -> list[dict]:
    """The sources the search found, in its order (above the threshold, then below it)."""
    by_id = {f"{m['conversation_id']}:{m['seq']}": m for m in sources}
    hits = [*search.get("items", []), *search.get("excluded", [])]
    ranked = [by_id[h["id"]] for h in hits if h.get("kind") == "message" and h.get("id") in by_id]
    return list({id(m): m for m in ranked}.values())


def turn_items(conversation: str, context: dict) -> list[tuple[str, str]]:
    """(kind, id) of every memory item in a turn's context."""
    items = []
    if context.get("summary"):
        items.append(("summary", f"{conversation}:{context['summary']['memory_id']}"))
    for item in (context.get("retrieved") or {}).get("items", []):
        items.append((item["kind"], item["id"]))
    if context.get("active_topic"):
        items.append(("topic", context["active_topic"]["topic_id"]))
    return items


def _who(derived: dict) -> str:
    parts = [f"prompt {derived['prompt_version']}" if derived.get("prompt_version") else "",
             f"model {derived['model']}" if derived.get("model") else "",
             f"embedding {derived['embedding_model']}" if derived.get("embedding_model") else ""]
    return ", ".join(p for p in parts if p)


def render_lineage(answer: dict, indent: str = "", served: dict | None = None) -> list[str]:
    """Lines of one item's lineage; `served` is the item as a turn's context held it."""
    item = answer["item"]
    head = f"{indent}{answer['kind']} {answer['id']}"
    if item.get("version"):
        head += f" v{item['version']}"
    if _who(answer):
        head += f" ({_who(answer)})"
    lines = [head]
    if served is not None:
        changed = "" if served["version"] == item.get("version") else " (changed since: now the line below)"
        score = f", score {served['score']:.3f}" if served.get("score") is not None else ""
        lines.append(f"{indent}  served v{served['version']}{score}{changed}: {served['content'][:120]!r}")
    if item.get("excerpt") or item.get("title"):
        lines.append(f"{indent}  {item.get('excerpt') or item.get('title')!r}")
    if answer.get("origin"):
        best = answer["origin"][0]
        lines.append(f"{indent}  <= came from message {best['conversation_id']}:{best['seq']} {best['role']}"
                     f" {best['occurred_at'][:19]} event {best['event_id']}: {best['excerpt'][:120]!r}")
        if len(answer["sources"]) > 1:
            lines.append(f"{indent}  (in a chunk of {len(answer['sources'])} messages, all listed below)")
    for via in answer.get("via", []):
        lines.append(f"{indent}  via {via['kind']} {via['id']} {_detail(via)}")
    for message in answer["sources"]:
        lines.append(f"{indent}  <- message {message['conversation_id']}:{message['seq']} {message['role']}"
                     f" {message['occurred_at'][:19]} event {message['event_id']}: {message['excerpt'][:70]!r}")
    if answer.get("sources_withheld"):
        lines.append(f"{indent}  <- {answer['sources_withheld']} message(s) you may not see")
    for change in answer.get("history", []):
        lines.append(f"{indent}  history: {change['change']} at {str(change.get('at'))[:19]}"
                     f" (event {change.get('event_id')})")
    for derived in answer.get("derived", []):
        lines.append(f"{indent}  -> {derived['kind']} {derived['id']} {_detail(derived)} {_who(derived)}".rstrip())
    for served in answer.get("served_in", []):
        lines.append(f"{indent}  served at turn {served['turn_seq']} of {served['conversation_id']}"
                     f" ({served['served_at'][:19]}, event {served['event_id']})")
    return lines


def _detail(derived: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in derived.get("detail", {}).items() if v is not None)


def render_turn(context: dict, lineages: dict[str, dict | None]) -> list[str]:
    as_of = context["as_of"]
    verdict = ("nothing was recorded for this turn" if as_of["matches"] is None
               else "matches the recorded context" if as_of["matches"] else "DIFFERS from the recorded context")
    lines = [f"turn {as_of['turn_seq']} of {context['conversation_id']} as of {as_of['at'][:26]}: {verdict}"
             + (f" (event {as_of['recorded_event_id']})" if as_of.get("recorded_event_id") else "")]
    lines += [f"  difference: {d}" for d in as_of["differences"]]
    if as_of.get("note"):
        lines.append(f"  note: {as_of['note']}")
    mark = context["watermark"]
    lines.append(f"watermark: summary up to {mark['summary_end_seq']}, last seq {mark['last_seq']},"
                 f" missing {mark['missing_seqs'] or 'none'}")
    gap = [m["seq"] for m in context["messages"]]
    lines.append(f"gap messages: {f'{gap[0]}..{gap[-1]}' if gap else 'none'}")
    served = {(i["kind"], i["id"]): i for i in (context.get("retrieved") or {}).get("items", [])}
    for kind, item_id in turn_items(context["conversation_id"], context):
        lines.append("")
        answer, then = lineages[f"{kind}/{item_id}"], served.get((kind, item_id))
        if answer is not None:
            lines += render_lineage(answer, served=then)
            continue
        lines.append(f"{kind} {item_id}: no longer in your memory (deleted or unshared since)")
        if then is not None:
            lines.append(f"  served v{then['version']}: {then['content'][:120]!r}")
    return lines
