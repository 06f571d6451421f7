"""Write JSON Schema files so producers in other languages can validate events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from schemas.envelope import Envelope
from schemas.limits import PG_INT_MAX
from schemas.registry import REGISTRY
from schemas.spec import EventSpec


def event_schema(spec: EventSpec) -> dict[str, Any]:
    """JSON Schema of one event type at its current version: envelope + typed payload."""
    schema = Envelope.model_json_schema()
    payload = spec.payload.model_json_schema()
    defs = {**schema.pop("$defs", {}), **payload.pop("$defs", {})}
    schema["title"] = f"{spec.type} v{spec.version}"
    schema["properties"]["type"] = {"const": spec.type, "title": "Type", "type": "string"}
    schema["properties"]["schema_version"] = {"const": spec.version, "title": "Schema Version", "type": "integer"}
    schema["properties"]["payload"] = payload
    if spec.requires_seq:
        schema["properties"]["seq"] = {"type": "integer", "minimum": 0, "maximum": PG_INT_MAX, "title": "Seq"}
        schema["required"] = sorted({*schema.get("required", []), "seq"})
    if defs:
        schema["$defs"] = defs
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def export_schemas(out_dir: Path) -> list[Path]:
    """One file per event type, named `<type>.v<version>.schema.json`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for spec in REGISTRY.values():
        path = out_dir / f"{spec.type}.v{spec.version}.schema.json"
        path.write_bytes(orjson.dumps(event_schema(spec), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
        written.append(path)
    return written
