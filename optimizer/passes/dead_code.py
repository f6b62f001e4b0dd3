"""Dead-code elimination: remove nodes, initializers and functions nothing reaches.

Graph inputs and outputs are kept. Subgraphs (If/Loop/Scan bodies) are cleaned too; a node with
a subgraph is kept whenever any of its outputs is used. Built on onnx-ir's unused-node removal.
"""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedFunctionsPass, RemoveUnusedNodesPass, RemoveUnusedOpsetsPass

from onnx_fuse.passes._infra import FusePass, count_nodes


class DeadCodeEliminationPass(FusePass):
    name = "dead-code"

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        before_nodes = count_nodes(model)
        before_inits = sum(len(g.initializers) for g in model.graphs())
        modified = RemoveUnusedNodesPass()(model).modified
        modified |= RemoveUnusedFunctionsPass()(model).modified
        modified |= RemoveUnusedOpsetsPass()(model).modified
        removed_nodes = before_nodes - count_nodes(model)
        removed_inits = before_inits - sum(len(g.initializers) for g in model.graphs())
        if removed_nodes:
            self.stats["nodes-removed"] += removed_nodes
        if removed_inits:
            self.stats["initializers-removed"] += removed_inits
        return ir.passes.PassResult(model, modified=bool(modified or removed_nodes or removed_inits))
