"""The KServe v2 inference protocol over gRPC: the vendored interface (grpc_predict_v2.proto, see NOTICE), its
compiled descriptor, and the message classes made from it at run time (protobuf, an optional dependency:
``pip install 'latbench[grpc]'``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

from loadgen.errors import UsageError

DESCRIPTOR_FILE = Path(__file__).resolve().parent / "grpc_predict_v2.desc"
SERVICE = "inference.GRPCInferenceService"
MODEL_INFER = f"/{SERVICE}/ModelInfer"
MODEL_STREAM_INFER = f"/{SERVICE}/ModelStreamInfer"
INSTALL_HINT = "gRPC needs the grpc extra: pip install 'latbench[grpc]' (grpcio and protobuf)"


@lru_cache(maxsize=1)
def messages() -> SimpleNamespace:
    """The protocol's message classes (``ModelInferRequest``, ``ModelInferResponse``, ``ModelStreamInferResponse``,
    ``InferTensorContents``...), built once from the compiled descriptor."""
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        raise UsageError(INSTALL_HINT) from None
    fds = descriptor_pb2.FileDescriptorSet.FromString(DESCRIPTOR_FILE.read_bytes())
    pool = descriptor_pool.DescriptorPool()  # our own pool: no clash with another copy of the same protocol
    for f in fds.file:
        pool.Add(f)
    names = ("ModelInferRequest", "ModelInferResponse", "ModelStreamInferResponse", "InferTensorContents",
             "InferParameter", "ServerLiveRequest", "ServerLiveResponse", "ServerReadyRequest", "ServerReadyResponse",
             "ModelReadyRequest", "ModelReadyResponse", "ModelMetadataRequest", "ModelMetadataResponse")
    return SimpleNamespace(**{n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"inference.{n}"))
                              for n in names})
