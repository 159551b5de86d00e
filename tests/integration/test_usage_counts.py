"""A usage count that no record can hold (2**40 output tokens, a negative prompt) is not a count: the request is
recorded, ok, with its tokens counted by latbench, as when a server gives no usage. It raised inside the transport's
callback before, and the request's record (and a closed-loop user's chain of requests) was lost."""

import pytest

from tests.bad_servers import BadServer
from tests.helpers import run


@pytest.mark.parametrize("stream", [False, True])
def test_a_count_out_of_range_is_ignored_and_the_request_kept(tmp_path, stream):
    phase = "{name: main, duration: 1s, qps: 20}"  # (a closed loop of 20 requests ends early: held as too few)
    with BadServer() as srv:
        text = f"""
        name: usage
        target: {{url: "{srv.url('hugeusage')}", model: m, stream: {str(stream).lower()}}}
        load:
          arrival: constant
          host_wait_limit: 1
          phases: [{phase}]
        """
        res, s, df = run(tmp_path, text, preflight=False)
    assert len(df) == 20 and (df["error"] == "").all(), df["error"].value_counts()
    assert (df["output_tokens_source"] != "usage").all()
    assert (df["output_tokens"] == (2 if stream else 0)).all()  # a stream's tokens are counted as they come
    assert (df["prompt_tokens"] >= 0).all()
    assert res.exit_code == 0, res.reasons
