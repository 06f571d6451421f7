"""The local all-MiniLM-L6-v2 ONNX embedder: shapes, normalisation, semantics, laziness."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from core.embeddings import EmbeddingError, LocalOnnxEmbedder, make_embedder
from core.settings import EmbeddingSettings, Settings


@pytest.fixture(scope="module")
def embedder() -> LocalOnnxEmbedder:
    return LocalOnnxEmbedder(intra_op_threads=1)


async def test_documents_are_unit_float32_rows(embedder):
    vectors = await embedder.embed_documents(["WiFi problem", "apple pie", ""])
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert (embedder.model, embedder.dimensions) == ("all-MiniLM-L6-v2-onnx-int8", 384)


async def test_query_is_one_unit_vector(embedder):
    vector = await embedder.embed_query("WiFi problem")
    assert vector.shape == (384,) and vector.dtype == np.float32
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5


async def test_no_texts_give_an_empty_matrix(embedder):
    assert (await embedder.embed_documents([])).shape == (0, 384)


async def test_related_texts_are_closer_than_unrelated_ones(embedder):
    query = await embedder.embed_query("WiFi problem")
    related, unrelated = await embedder.embed_documents(
        ["network configuration issue on the router", "my grandmother's apple pie recipe"]
    )
    assert float(query @ related) > float(query @ unrelated) + 0.25


async def test_batching_and_order_do_not_change_vectors():
    texts = ["a short one", "WiFi problem " * 40, "network configuration issue", "pie"]
    batched = await LocalOnnxEmbedder(batch_size=32).embed_documents(texts)
    single = await LocalOnnxEmbedder(batch_size=1).embed_documents(texts)
    np.testing.assert_allclose(batched, single, atol=1e-5)
    assert float(batched[1] @ batched[3]) < 0.9  # rows were not mixed up


async def test_texts_are_truncated_to_max_length(embedder):
    head = "The router firmware update fixed the evening WiFi drops. " * 60  # > 256 tokens
    a, b = await embedder.embed_documents([head, head + " grandmother's apple pie" * 30])
    assert float(a @ b) > 0.9999


async def test_model_loads_lazily_and_reports_a_missing_file(tmp_path: Path):
    broken = LocalOnnxEmbedder(model_path=tmp_path / "missing.onnx")  # no error yet
    with pytest.raises(EmbeddingError) as caught:
        await broken.embed_query("x")
    assert caught.value.retryable is False


def test_factory_builds_the_local_model_by_default():
    embedder = make_embedder(Settings())
    assert isinstance(embedder.inner.provider, LocalOnnxEmbedder)  # behind the process's embedding queue
    assert embedder.dimensions == Settings().embedding.dimensions


@pytest.mark.parametrize(
    "config",
    [EmbeddingSettings(model="nomic-embed-text"), EmbeddingSettings(dimensions=768)],
)
def test_factory_refuses_local_models_it_does_not_ship(config):
    with pytest.raises(ValueError):
        make_embedder(Settings(embedding=config))


async def test_the_integer_graph_is_cheaper_integer_products_close_to_the_float_vectors(embedder, tmp_path: Path):
    from core.embeddings.integer_graph import integer_matmul_model
    from core.embeddings.local_onnx import default_model_path

    import onnx

    ops = [node.op_type for node in onnx.load_from_string(integer_matmul_model(default_model_path())).graph.node]
    assert ops.count("MatMulIntegerToFloat") == 36  # 6 layers x 6, their activations quantized per row:
    assert ops.count("ReduceMax") == 24 and ops.count("DynamicQuantizeLinear") == 0  # Q, K, V share theirs
    assert ops.count("MatMul") == 12  # left as they were: attention's activation x activation products
    integer = LocalOnnxEmbedder(intra_op_threads=1, integer_matmul=True)
    texts = ["Does Caroline have a pet?", "network configuration issue on the router", "apple pie " * 30]
    floats, ints = embedder.embed_sync(texts), integer.embed_sync(texts)
    cosines = np.sum(floats * ints, axis=1)
    assert cosines.min() > 0.99 and cosines.max() < 0.99999  # close, and really another graph
    assert (integer.integer_matmul, embedder.integer_matmul) == (True, False)
    assert (embedder.model, integer.model) == ("all-MiniLM-L6-v2-onnx-int8", "all-MiniLM-L6-v2-onnx-int8+int2")
    with pytest.raises(ValueError, match="no int8 weight"):
        integer_matmul_model(_a_float_model(tmp_path))


@pytest.mark.parametrize("integer_matmul", [False, True])
def test_a_texts_vector_does_not_depend_on_the_texts_batched_with_it(integer_matmul):
    """The embedding queue batches the questions of concurrent requests (other users', other
    tenants') padded to the longest: a question's vector must be the one it gets alone."""
    model = LocalOnnxEmbedder(intra_op_threads=1, integer_matmul=integer_matmul)
    question = "Does Caroline have a pet?"
    longer = "Which port was the database configured on again, after the router's network issue? " * 4
    alone = model.embed_sync([question])[0]
    batched = model.embed_sync([longer, question, "apple pie"])[1]
    assert np.abs(alone - batched).max() < 1e-6


def _a_float_model(tmp_path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "f",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
                              [numpy_helper.from_array(np.eye(2, dtype=np.float32), "w")])
    path = tmp_path / "float.onnx"
    onnx.save(helper.make_model(graph), str(path))
    return path
