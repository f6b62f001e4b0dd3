"""Names and versions of our TensorRT plugin ops: the one place they are written in Python.

TensorRT's ONNX parser maps a node to a plugin by op type = plugin name plus the
``plugin_version`` and ``plugin_namespace`` attributes; our nodes live in domain ``onnx_fuse``.
The optimizer (trt target, paged KV, precision, verify, the ORT reference ops) and the plugins
(registration, engine builder, check-trt) import these. The YAML rule packs and plugin contracts
write the same strings as data; tests/targets/test_targets.py checks that they agree.
This module sits at the package's top level (like errors.py) so that passes, targets and plugins
can all import it without pointing dependencies the wrong way.
"""

from __future__ import annotations

#: ONNX domain of our plugin ops, and the opset version imported for it.
PLUGIN_DOMAIN = "onnx_fuse"
PLUGIN_DOMAIN_VERSION = 1
#: TensorRT plugin namespace (``plugin_namespace`` attribute).
PLUGIN_NAMESPACE = "onnx_fuse"
#: Plugin (= op type) -> version (``plugin_version`` attribute), as registered by plugins/.
PLUGIN_VERSIONS = {"FusedAttention": "1", "PagedAttention": "1"}
#: Attributes only TensorRT reads; other runtimes (ORT reference ops) drop them.
TRT_ONLY_ATTRS = ("plugin_version", "plugin_namespace")
