"""Sparse initializers become dense ones at load, as ONNX Runtime does when it loads a model.

onnx-ir reads no ``graph.sparse_initializer``: the values they name would have no producer, and
the optimized model failed the checker (an internal error). A dense initializer of the same name
and the same values is what every consumer of the value sees in ORT, so the optimized model
computes the same thing; it stores the zeros, which the saved file then holds too.

Refused (one line): string values, indices outside the dense shape, a count of values that does not match the
indices, a dense form over ``MAX_DENSE_BYTES``, and a sparse initializer that is also a graph
input (an overridable sparse default, which a dense initializer would not keep).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from onnx_fuse.errors import UserError
from onnx_fuse.passes._subgraph_scopes import all_subgraphs

#: the largest dense form made from a sparse initializer (2 GiB: the protobuf limit of one model)
MAX_DENSE_BYTES = 2 << 30
#: index types ONNX Runtime's saver writes (the narrowest that holds the indices), which ORT
#: reads back and the ONNX checker refuses ("indices must have INT64 type")
_NARROW_INDICES = (onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32)


def widen_sparse_indices(proto: onnx.ModelProto) -> None:
    """Store narrow embedded sparse indices as int64 (in place), before the checker: a model saved
    by ORT's offline optimizer (optimized_model_filepath) loads in ORT and is then ours too."""
    for graph in (proto.graph, *all_subgraphs(proto.graph)):
        for sparse in graph.sparse_initializer:
            ind = sparse.indices
            if ind.data_type in _NARROW_INDICES and ind.data_location != onnx.TensorProto.EXTERNAL:
                ind.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(ind).astype(np.int64), ind.name))



def _dense(sparse: onnx.SparseTensorProto, base_dir: str | None, where: str) -> onnx.TensorProto:
    values = numpy_helper.to_array(sparse.values, base_dir or "")
    if values.dtype == object:
        raise UserError(f"{where}: sparse string tensors are not supported")
    indices = numpy_helper.to_array(sparse.indices, base_dir or "").astype(np.int64, copy=False)
    dims = [int(d) for d in sparse.dims]
    if any(d < 0 for d in dims):
        raise UserError(f"{where}: negative dims {dims}")
    size = int(np.prod(dims, dtype=object)) if dims else 1
    if size * values.dtype.itemsize > MAX_DENSE_BYTES:
        raise UserError(f"{where}: its dense form {dims} would take {size * values.dtype.itemsize} "
                        f"bytes (at most {MAX_DENSE_BYTES})")
    values = values.reshape(-1)
    if indices.ndim == 2 and indices.shape[1] == len(dims) and len(dims) > 1:
        if ((indices < 0) | (indices >= np.array(dims))).any():
            raise UserError(f"{where}: an index lies outside dims {dims}")
        flat = np.ravel_multi_index(tuple(indices.T), dims) if len(indices) else indices[:, 0]
    elif indices.ndim == 1:
        flat = indices
    else:
        raise UserError(f"{where}: indices of shape {list(indices.shape)} fit neither [NNZ] nor "
                        f"[NNZ, {len(dims)}]")
    if len(flat) != len(values):
        raise UserError(f"{where}: {len(values)} values for {len(flat)} indices")
    if len(flat) and (flat.min() < 0 or flat.max() >= size):
        raise UserError(f"{where}: an index lies outside dims {dims}")
    dense = np.zeros(size, values.dtype)
    dense[flat] = values
    return numpy_helper.from_array(dense.reshape(dims), sparse.values.name)


def densify_sparse_initializers(proto: onnx.ModelProto, base_dir: str | None, what: str) -> None:
    """Replace every graph's sparse initializers by dense ones of the same names (in place)."""
    for graph in (proto.graph, *all_subgraphs(proto.graph)):
        if not graph.sparse_initializer:
            continue
        inputs = {vi.name for vi in graph.input}
        for sparse in graph.sparse_initializer:
            name = sparse.values.name
            where = f"{what}: sparse initializer {name!r}"
            if name in inputs:
                raise UserError(f"{where} is also a graph input (an overridable sparse default); "
                                "onnx-fuse keeps only dense defaults")
            graph.initializer.append(_dense(sparse, base_dir, where))
        graph.ClearField("sparse_initializer")
