"""What travels between the Locust master and its workers, besides Locust's own messages.

Message types (Locust custom messages, ``runner.send_message`` / ``runner.register_message``):

=============  ==============  =====================================================================
type           direction       data
=============  ==============  =====================================================================
lb_hello       worker->master  ``{label, host, pid}``, once, right after the worker connected
lb_start       master->worker  the run (``master.run_config``) plus ``k``, ``n`` and ``t0_wall``
lb_records     worker->master  ``{k, rows, data, sent, in_flight, errors}``: one Arrow IPC batch
lb_done        worker->master  ``{k, requests, rows, cpu, end, notes, interrupted}``, once, last
lb_stop        master->worker  stop sending; in-flight requests get the grace period
lb_abort       master->worker  stop at once; in-flight requests are recorded as ``cancelled``
=============  ==============  =====================================================================

Records travel as Arrow IPC stream bytes (msgpack carries bytes as they are), already relative to the
run's ``t0``, so the master writes them without touching a value.
"""

from __future__ import annotations

import pyarrow as pa

from loadgen.records.schema import SCHEMA


def batch_to_bytes(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, SCHEMA) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def batch_from_bytes(data: bytes) -> pa.RecordBatch:
    reader = pa.ipc.open_stream(pa.py_buffer(data))
    batches = list(reader)
    return batches[0] if len(batches) == 1 else pa.Table.from_batches(batches, SCHEMA).combine_chunks().to_batches()[0]
