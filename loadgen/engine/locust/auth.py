"""The secret a Locust master's workers prove they know before it sends them anything of the run.

Locust's master/worker messages travel over ZeroMQ with no authentication: any process that reaches the
master's port could join and be sent the run (the target's expanded headers, ``extra_body``). So every worker
answers a challenge: the master sends a fresh nonce to each process that joins (``lb_challenge``), the worker
answers ``HMAC-SHA256(secret, nonce:client_id)`` (``lb_auth``), and only then is it a Locust worker of the run
(:mod:`loadgen.engine.locust.handshake`). A process that cannot answer gets nothing but the challenge and a
refusal, and is named in the log. The secret itself never travels: not in a message, not on a command line.

Where the secret comes from: the caller's :data:`SECRET_ENV` or the file :data:`SECRET_FILE_ENV` names (for
``latbench worker`` also ``--secret-file``); a run with only local workers makes a fresh one per run and hands
it to the workers it starts through their environment. This module is pure (no locust, no gevent): the CLI
imports it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from typing import Mapping

from loadgen.errors import UsageError

#: The run's worker secret, in the environment of ``latbench run`` and of ``latbench worker``.
SECRET_ENV = "LATBENCH_WORKER_SECRET"
#: ... or the path of a file holding it (its first line; surrounding whitespace is ignored).
SECRET_FILE_ENV = "LATBENCH_WORKER_SECRET_FILE"
#: A shorter secret could be guessed: it is refused.
MIN_SECRET_LEN = 16


def new_secret() -> str:
    """A fresh random secret for one run (256 bits, hex)."""
    return secrets.token_hex(32)


def read_secret(file: str | os.PathLike | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """The worker secret the user gave: ``file`` (a path), else the file :data:`SECRET_FILE_ENV` names, else
    :data:`SECRET_ENV`; None when none is given. A UsageError names the variable or the file that is unusable
    (never quoting the secret)."""
    env = os.environ if environ is None else environ
    source = f"--secret-file {file}" if file else None
    if file is None and env.get(SECRET_FILE_ENV):
        file, source = env[SECRET_FILE_ENV], f"{SECRET_FILE_ENV}={env[SECRET_FILE_ENV]}"
    if file:
        try:
            text = Path(file).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{source}: the worker secret cannot be read ({type(exc).__name__}: "
                             f"{getattr(exc, 'strerror', None) or exc})") from None
        value = (text.strip().splitlines() or [""])[0].strip()
    elif env.get(SECRET_ENV) is not None:
        value, source = env[SECRET_ENV].strip(), SECRET_ENV
    else:
        return None
    if len(value) < MIN_SECRET_LEN:
        raise UsageError(f"{source}: the worker secret is {len(value)} characters long; give at least "
                         f"{MIN_SECRET_LEN} (e.g. python -c 'import secrets; print(secrets.token_hex(32))')")
    return value


def proof(secret: str, nonce: str, client_id: str) -> str:
    """What a worker answers to the challenge ``nonce``: bound to its own Locust client id."""
    msg = f"latbench-worker:{nonce}:{client_id}".encode()
    return hmac.new(secret.encode(), msg, hashlib.sha256).hexdigest()


def is_proof(secret: str, nonce: str, client_id: str, answer) -> bool:
    """Whether ``answer`` proves ``client_id`` knows ``secret`` (compared in constant time)."""
    return isinstance(answer, str) and hmac.compare_digest(answer, proof(secret, nonce, client_id))
