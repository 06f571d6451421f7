"""The int8 export run as integer products: its weight matrices fed to `MatMulInteger` as they are
stored (int8, one scale per output column) with each call's activations quantized on the fly
(`DynamicQuantizeLinear`: uint8, one scale and zero point per tensor), instead of being
dequantized to float32 when the session is built.

Why: the export stores int8 weights behind a `Cast` + `Mul`, which ONNX Runtime folds into
float32 constants, so the model runs 36 float32 `MatMul`s streaming ~42 MB of weights per call.
As integer products the same weights are ~11 MB and MLAS's int8 kernels run them: ~0.45 of the
CPU per short question on this AVX2 machine (docs/retrieval.md, "Sixth round"). The vectors are
not the float graph's (the activations are rounded to 8 bits): cosine ~0.99 to them, so this graph
is another model (`INTEGER_MODEL_NAME` in local_onnx.py): the questions' by default; a generation's
documents only when it is derived with `embedding.integer_matmul` from its start
(docs/llm-and-embeddings.md, "Two graphs of one model"; its quality: docs/evaluation.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def integer_matmul_model(path: Path) -> bytes:
    """The serialized model of `path` with every `MatMul(x, Mul(Cast(W_int8), scale))` whose scale is
    one per output column rewritten as integer products; everything else (embeddings' gathers,
    attention, layer norms) unchanged. Raises ValueError when the graph has no such product."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    producer = {output: node for node in graph.node for output in node.output}
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    dropped: set[int] = set()
    replaced: dict[int, list] = {}
    added = []
    for mul in graph.node:
        if mul.op_type != "Mul" or len(mul.input) != 2:
            continue
        users = consumers.get(mul.output[0], [])
        cast = producer.get(mul.input[0])
        if (len(users) != 1 or users[0].op_type != "MatMul" or users[0].input[1] != mul.output[0]
                or cast is None or cast.op_type != "Cast" or cast.input[0] not in initializers
                or mul.input[1] not in initializers):
            continue
        weights = numpy_helper.to_array(initializers[cast.input[0]])
        scale = numpy_helper.to_array(initializers[mul.input[1]]).astype(np.float32)
        if weights.dtype != np.int8 or weights.ndim != 2 or scale.shape not in ((1, weights.shape[1]),
                                                                                (weights.shape[1],)):
            continue
        matmul, name = users[0], cast.input[0]
        dropped.update((id(mul), id(cast)))
        added += [numpy_helper.from_array(weights, f"{name}_int"),
                  numpy_helper.from_array(scale.reshape(-1), f"{name}_int_scale")]
        replaced[id(matmul)] = [
            helper.make_node("DynamicQuantizeLinear", [matmul.input[0]], [f"{name}_xq", f"{name}_xs", f"{name}_xz"]),
            helper.make_node("MatMulInteger", [f"{name}_xq", f"{name}_int", f"{name}_xz"], [f"{name}_i32"]),
            helper.make_node("Cast", [f"{name}_i32"], [f"{name}_f32"], to=TensorProto.FLOAT),
            helper.make_node("Mul", [f"{name}_xs", f"{name}_int_scale"], [f"{name}_scale"]),
            helper.make_node("Mul", [f"{name}_f32", f"{name}_scale"], list(matmul.output)),
        ]
    if not replaced:
        raise ValueError(f"{path}: no int8 weight matrix with per-column scales feeds a MatMul")
    nodes = [new for node in graph.node if id(node) not in dropped for new in replaced.get(id(node), [node])]
    del graph.node[:]
    graph.node.extend(nodes)
    used = {name for node in graph.node for name in node.input}
    kept = [i for i in graph.initializer if i.name in used] + added
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return model.SerializeToString()
