"""The worker's Prometheus metrics, read from its /metrics and reduced to what the dashboard shows."""

from __future__ import annotations

import math
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

PREFIX = "memory_"


def summarize(text: str) -> list[dict[str, Any]]:
    """Prometheus text -> one entry per memory_* sample family: counters and gauges by label set;
    histograms as count, sum and mean per label set (buckets left out)."""
    out = []
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(PREFIX) or family.name.endswith("_created"):
            continue  # *_created: when each series started (a gauge of its own in the text format)
        entry: dict[str, Any] = {"name": family.name, "type": family.type, "help": family.documentation, "samples": []}
        if family.type == "histogram":
            series: dict[tuple, dict[str, Any]] = {}
            for s in family.samples:
                labels = {k: v for k, v in s.labels.items() if k != "le"}
                key = tuple(sorted(labels.items()))
                row = series.setdefault(key, {"labels": labels})
                if s.name.endswith("_count"):
                    row["count"] = s.value
                elif s.name.endswith("_sum"):
                    row["sum"] = s.value
            for row in series.values():
                count = row.get("count", 0)
                row["mean"] = row.get("sum", 0) / count if count else None
                entry["samples"].append(row)
        else:
            for s in family.samples:
                if math.isnan(s.value):
                    continue
                entry["samples"].append({"labels": dict(s.labels), "value": s.value})
        out.append(entry)
    return out


def deployment_of(metrics: list[dict[str, Any]]) -> dict[str, str] | None:
    """The labels of memory_deployment_info (which deployment the process belongs to), if it says."""
    for family in metrics:
        if family["name"] == "memory_deployment_info" and family["samples"]:
            return family["samples"][0]["labels"]
    return None


async def fetch(url: str, deployment: str, timeout_s: float = 3.0) -> dict[str, Any]:
    """{"url", "metrics"} from the worker of this deployment, or {"url", "error"} when nothing answers
    or what answers is another deployment's (or says not whose it is)."""
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as http:
            response = await http.get(url)
            response.raise_for_status()
    except httpx.HTTPError as exc:
        return {"url": url, "error": f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__}
    metrics = summarize(response.text)
    owner = deployment_of(metrics)
    if owner is None or owner.get("deployment") != deployment:
        whose = "says not which deployment it belongs to" if owner is None else (
            f"belongs to another deployment (topic prefix {owner.get('topic_prefix')!r},"
            f" generation {owner.get('generation')!r})")
        return {"url": url, "error": f"the process answering there {whose}: its metrics are not shown. Give this"
                                     " deployment's worker its own MEMORY_WORKER__METRICS_PORT (and the API the same)"}
    return {"url": url, "metrics": metrics}
