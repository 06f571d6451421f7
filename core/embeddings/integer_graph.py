"""The int8 export run as integer products: its weight matrices fed to `MatMulIntegerToFloat` as they
are stored (int8, one scale per output column) with each call's activations quantized on the fly to
uint8 **per row** (each token's hidden vector: scale = max |x| / 127, zero point 128), instead of
being dequantized to float32 when the session is built.

Why: the export stores int8 weights behind a `Cast` + `Mul`, which ONNX Runtime folds into
float32 constants, so the model runs 36 float32 `MatMul`s streaming ~42 MB of weights per call.
As integer products the same weights are ~11 MB and MLAS's int8 kernels (u8s8) run them: ~0.6 of
the CPU per short question on this AVX2 machine (docs/retrieval.md, "Sixth round", "Eighth
round"). Per row, because a row's quantization then depends on nothing but the row: a text's
vector is the same alone or batched with other texts (the embedding queue batches concurrent
requests' questions, padded to the longest). The first integer graph quantized per tensor
(`DynamicQuantizeLinear`): one scale for the whole batch, so a question's vector depended on what
other users asked at the same moment (kept as `per_tensor=True` for the benchmark). The vectors are
not the float graph's (the activations are rounded to 8 bits): cosine ~0.997 to them, so this graph
is another model (`INTEGER_MODEL_NAME` in local_onnx.py): the questions' by default; a generation's
documents only when it is derived with `embedding.integer_matmul` from its start
(docs/llm-and-embeddings.md, "Two graphs of one model"; its quality: docs/evaluation.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


ZERO_POINT, ONE, FLOOR, STEP, OFFSET = "q8_zero_point", "q8_one", "q8_floor", "q8_step", "q8_offset"


def integer_matmul_model(path: Path, *, per_tensor: bool = False) -> bytes:
    """The serialized model of `path` with every `MatMul(x, Mul(Cast(W_int8), scale))` whose scale is
    one per output column rewritten as integer products; everything else (embeddings' gathers,
    attention, layer norms) unchanged. Raises ValueError when the graph has no such product.

    Each row of the activations (a token's hidden vector) is quantized on its own, symmetrically:
    scale = max |x| over the row / 127, uint8 = round(x / scale) + 128, one zero point (128) for
    all, so MatMulInteger keeps MLAS's u8s8 kernels and a row's product depends on that row alone,
    never on the other texts of its batch nor on their padding. `per_tensor`: the first integer
    graph (`DynamicQuantizeLinear`, one scale and zero point per call's whole tensor, so a text's
    vector depended on its batch); for measurements only (bench/query_embedding_bench.py)."""
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
    sources: dict[int, str] = {}  # a rewritten MatMul: its activations' name (quantized per row once)
    added = [] if per_tensor else [numpy_helper.from_array(np.array(128, dtype=np.uint8), ZERO_POINT),
                                   numpy_helper.from_array(np.array(1e-12, dtype=np.float32), FLOOR),
                                   numpy_helper.from_array(np.array(1 / 127, dtype=np.float32), STEP),
                                   numpy_helper.from_array(np.array(128, dtype=np.float32), OFFSET),
                                   numpy_helper.from_array(np.array(1, dtype=np.float32), ONE)]
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
        source = matmul.input[0]
        if per_tensor:
            replaced[id(matmul)] = _per_tensor_product(helper, TensorProto, source, name, list(matmul.output))
            continue
        sources[id(matmul)] = source
        xq, xs = f"{source}_q8", f"{source}_q8_scale"
        replaced[id(matmul)] = [  # (x_q - 128) @ W as float32 times the weights' column scales, then the rows'
            helper.make_node("MatMulIntegerToFloat", [xq, f"{name}_int", ONE, f"{name}_int_scale", ZERO_POINT],
                             [f"{name}_cols"], domain="com.microsoft"),
            helper.make_node("Mul", [f"{name}_cols", xs], list(matmul.output)),
        ]
    if not replaced:
        raise ValueError(f"{path}: no int8 weight matrix with per-column scales feeds a MatMul")
    if not per_tensor and not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    nodes, quantized = [], set()
    for node in graph.node:
        if id(node) in dropped:
            continue
        source = sources.get(id(node))
        if source is not None and source not in quantized:  # a layer's Q, K and V products share one
            quantized.add(source)
            nodes += _per_row_quantization(helper, TensorProto, source)
        nodes += replaced.get(id(node), [node])
    del graph.node[:]
    graph.node.extend(nodes)
    used = {name for node in graph.node for name in node.input}
    kept = [i for i in graph.initializer if i.name in used] + added
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return model.SerializeToString()


def _per_row_quantization(helper, TensorProto, x: str) -> list:
    """x (..., hidden) float32 -> f"{x}_q8" uint8 of the same shape and f"{x}_q8_scale" (..., 1)."""
    return [
        helper.make_node("Abs", [x], [f"{x}_q8_abs"]),
        helper.make_node("ReduceMax", [f"{x}_q8_abs"], [f"{x}_q8_max"], axes=[-1], keepdims=1),
        helper.make_node("Max", [f"{x}_q8_max", FLOOR], [f"{x}_q8_kept"]),  # an all-zero row: no 0 / 0
        helper.make_node("Mul", [f"{x}_q8_kept", STEP], [f"{x}_q8_scale"]),
        helper.make_node("Div", [x, f"{x}_q8_scale"], [f"{x}_q8_steps"]),
        helper.make_node("Round", [f"{x}_q8_steps"], [f"{x}_q8_round"]),
        # |x| <= max |x|, so round(x / scale) is within [-127, 127] and + 128 within [1, 255]: no Clip
        helper.make_node("Add", [f"{x}_q8_round", OFFSET], [f"{x}_q8_shift"]),
        helper.make_node("Cast", [f"{x}_q8_shift"], [f"{x}_q8"], to=TensorProto.UINT8),
    ]


def _per_tensor_product(helper, TensorProto, x: str, name: str, output: list[str]) -> list:
    return [
        helper.make_node("DynamicQuantizeLinear", [x], [f"{name}_xq", f"{name}_xs", f"{name}_xz"]),
        helper.make_node("MatMulInteger", [f"{name}_xq", f"{name}_int", f"{name}_xz"], [f"{name}_i32"]),
        helper.make_node("Cast", [f"{name}_i32"], [f"{name}_f32"], to=TensorProto.FLOAT),
        helper.make_node("Mul", [f"{name}_xs", f"{name}_int_scale"], [f"{name}_scale"]),
        helper.make_node("Mul", [f"{name}_f32", f"{name}_scale"], output),
    ]
