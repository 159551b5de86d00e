"""Compile grpc_predict_v2.proto into grpc_predict_v2.desc (a FileDescriptorSet) for latbench and the reference
server: ``python -m loadgen.protocols.kserve_grpc.generate`` (needs grpcio-tools; run after editing the .proto).

The compiled descriptor is loaded at run time by protobuf's own descriptor pool, so no generated Python code is
checked in and any protobuf runtime of the supported range reads it.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = HERE / "grpc_predict_v2.proto"
DESC = "grpc_predict_v2.desc"
#: Where the compiled descriptor is kept: latbench's copy, and the reference server's (it imports nothing of ours).
TARGETS = (HERE / DESC, HERE.parents[2] / "reference_server" / "api" / DESC)


def compile_descriptor(proto: Path = PROTO) -> bytes:
    """The serialized FileDescriptorSet of ``proto`` (no source info: the same bytes for the same interface)."""
    from grpc_tools import protoc  # a build tool, imported only here

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / DESC
        rc = protoc.main(["protoc", f"-I{proto.parent}", f"--descriptor_set_out={out}", proto.name])
        if rc != 0:
            raise RuntimeError(f"protoc failed on {proto} (exit {rc})")
        return out.read_bytes()


def main() -> int:
    data = compile_descriptor()
    for path in TARGETS:
        path.write_bytes(data)
        print(f"wrote {path} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
