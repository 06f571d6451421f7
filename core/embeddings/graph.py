"""Which graph of the local model a generation's documents are embedded with.

The local model runs as float products (`MODEL_NAME`, the default) or as integer products
(`INTEGER_MODEL_NAME`, `embedding.integer_matmul`). Their vectors of one text are ~0.99 cosine
apart: two models. A generation's graph is fixed by its first stored vectors; the setting only
chooses the graph of a generation that has none. So a deployment whose setting (or default)
changes keeps its live generation's graph, and moves to the other one by a replay into a new
generation
(docs/llm-and-embeddings.md, "Two graphs of one model").
"""

from __future__ import annotations

from collections.abc import Iterable

from core.embeddings.local_onnx import INTEGER_MODEL_NAME, MODEL_NAME, PER_TENSOR_INTEGER_MODEL_NAME
from core.settings import Settings

# The first integer graph's vectors (per-tensor activations, "+int") count as integer: such a
# generation keeps integer products, now per row, under the new name (a replay re-derives it whole).
GRAPHS = {MODEL_NAME: False, INTEGER_MODEL_NAME: True, PER_TENSOR_INTEGER_MODEL_NAME: True}


def stored_graph(models: Iterable[str | None]) -> bool | None:
    """Whether the stored vectors named `models` come from the integer graph (True) or the float
    one (False); None when none is the local model's. The float graph wins a mix (the rows of a
    generation derived before the graphs had names of their own)."""
    graphs = {GRAPHS[m] for m in models if m in GRAPHS}
    return None if not graphs else min(graphs)


def following_stored(settings: Settings, models: Iterable[str | None]) -> Settings:
    """`settings` with `embedding.integer_matmul` set to the graph of the generation's stored
    vectors (`models`: the names its rows record), unchanged when it has none of the local model's
    or the provider is not the local one."""
    if settings.embedding.provider != "local":
        return settings
    graph = stored_graph(models)
    if graph is None or graph == settings.embedding.integer_matmul:
        return settings
    return settings.model_copy(update={"embedding": settings.embedding.model_copy(update={"integer_matmul": graph})})
