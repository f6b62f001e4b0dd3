"""Error types: what the user did wrong (exit 2, one line) versus what we did wrong (exit 1)."""

from __future__ import annotations


class OnnxFuseError(Exception):
    """Base class of every error onnx-fuse raises on purpose."""

    exit_code = 1


class UserError(OnnxFuseError):
    """Bad input: a missing file, a corrupt model, unsafe external data, a bad flag or rule.

    The CLI prints ``error: <message>`` on one line and exits 2, with no traceback.
    """

    exit_code = 2


class InternalError(OnnxFuseError):
    """A bug in onnx-fuse. The CLI keeps the traceback (with -v) and exits 1."""

    exit_code = 1


class VerificationError(OnnxFuseError):
    """The optimized model's outputs differ from the original's beyond tolerance."""

    exit_code = 1


class OnnxFuseWarning(UserWarning):
    """onnx-fuse could not optimize a model and runs the original instead."""
