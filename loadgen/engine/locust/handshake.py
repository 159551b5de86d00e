"""Locust's master and worker runners with the challenge of :mod:`loadgen.engine.locust.auth` in front.

The master (:class:`GuardedMaster`) lets nothing of a process that joins reach Locust until it has proved the
run's secret: its ``client_ready`` is answered with ``lb_challenge`` instead of Locust's ``ack``, and only a
right ``lb_auth`` hands the ``client_ready`` on to Locust (which then acks it and counts it as a worker). So a
process that does not know the secret is never in ``runner.clients``: no Locust message to all workers, no
user to spawn, and none of latbench's messages (``lb_start`` holds the target's headers) reach it; everything
it sends is dropped, and it is named once in the log. Processes are told apart by their ZeroMQ routing id
(what the master's replies are addressed to), never by the ``node_id`` a message claims.

The worker (:class:`ProvingWorker`) answers the challenge from its message loop, which runs while Locust's
constructor waits for the ``ack``; a refusal ends that wait with :attr:`ProvingWorker.refused` set.

Imported only by the master and worker processes (locust, gevent).
"""

from __future__ import annotations

import logging
import secrets

from locust.rpc import Message
from locust.runners import MasterRunner, WorkerRunner

from loadgen.engine.locust.auth import is_proof, proof

log = logging.getLogger("latbench.locust")


class GuardedMaster(MasterRunner):
    """A MasterRunner whose workers proved they know ``secret``. ``refused``: routing id -> why, of every
    process turned away (the master names them in its notes)."""

    def __init__(self, environment, master_bind_host: str, master_bind_port: int, secret: str) -> None:
        self._secret = secret
        self._nonces: dict[str, str] = {}  # routing id -> the challenge it was sent
        self._ready: dict[str, Message] = {}  # routing id -> its client_ready, handed to Locust once proved
        self.proved: set[str] = set()
        self.refused: dict[str, str] = {}
        super().__init__(environment, master_bind_host, master_bind_port)
        environment.runner = self  # what Environment.create_master_runner does

    def handle_message(self, client_id: str, msg: Message) -> None:
        if client_id in self.proved:
            return super().handle_message(client_id, msg)
        if client_id in self.refused:
            return  # named once already
        if msg.type == "client_ready":
            self._ready[client_id] = msg
            nonce = self._nonces.setdefault(client_id, secrets.token_hex(16))  # a retried hello: the same one
            self.server.send_to_client(Message("lb_challenge", {"nonce": nonce}, client_id))
        elif msg.type == "lb_auth" and client_id in self._nonces:
            answer = msg.data.get("proof") if isinstance(msg.data, dict) else None
            if not is_proof(self._secret, self._nonces[client_id], client_id, answer):
                return self._refuse(client_id, "its answer to the challenge does not prove the run's secret")
            del self._nonces[client_id]
            self.proved.add(client_id)
            log.debug("Locust worker %s proved the run's secret", client_id)
            super().handle_message(client_id, self._ready.pop(client_id))
        else:
            self._refuse(client_id, f"it sent {msg.type!r} without proving the run's secret")

    def _refuse(self, client_id: str, why: str) -> None:
        self.refused[client_id] = why
        self._nonces.pop(client_id, None)
        self._ready.pop(client_id, None)
        log.warning("refused a process that joined the Locust master as %r: %s; nothing of the run is sent "
                    "to it", client_id, why)
        self.server.send_to_client(Message("lb_refused", {"why": why}, client_id))


class ProvingWorker(WorkerRunner):
    """A WorkerRunner that answers the master's challenge with ``secret``. ``refused``: the master's reason
    when it turned this worker away (None while it has not)."""

    def __init__(self, environment, master_host: str, master_port: int, secret: str) -> None:
        self._secret = secret  # before Locust's constructor, which sends client_ready and waits for the ack
        self.refused: str | None = None
        super().__init__(environment, master_host, master_port)
        environment.runner = self  # what Environment.create_worker_runner does

    def handle_message(self, msg: Message) -> None:
        if msg.type == "lb_challenge":
            answer = proof(self._secret, msg.data["nonce"], self.client_id)
            self.client.send(Message("lb_auth", {"proof": answer}, self.client_id))
        elif msg.type == "lb_refused":
            self.refused = str((msg.data or {}).get("why") or "refused")
            self.connection_event.set()  # ends the constructor's wait for an ack that will not come
        else:
            super().handle_message(msg)
