"""What every metric in a RunDir means and in which unit: written to metrics.json, one definition each."""

SCHEMA_VERSION = 1

METRIC_DEFINITIONS = {
    "latency": {"unit": "s", "definition": ("done - scheduled: from the intended send time to the last byte "
                                            "(coordinated omission corrected)")},
    "service_time": {"unit": "s", "definition": "done - sent: from the moment the request left to the last byte"},
    "ttft": {"unit": "s",
             "definition": ("first_token - scheduled: time to the first token of a stream, of any kind: content, "
                            "reasoning (reasoning_content, reasoning), a tool call or completion text")},
    "ttfat": {"unit": "s",
              "definition": ("first_answer - scheduled: time to the first answer token of a stream (content, a "
                             "tool call or completion text; not reasoning): what a user of a reasoning model "
                             "waits for")},
    "reasoning_time": {"unit": "s", "definition": ("first_answer - first_token, for requests that reasoned: how "
                                                   "long the model thought before answering")},
    "reasoning_tokens": {"unit": "tokens", "definition": ("reasoning tokens of successful requests (usage's "
                                                          "completion_tokens_details.reasoning_tokens, else "
                                                          "counted reasoning chunks): requests, total, mean")},
    "itl": {"unit": "s", "definition": ("inter-token latency, per token: a chunk that carried n tokens after a gap "
                                        "g gives n samples of g / n (tokens per chunk: chunk_tokens, by "
                                        "chunk_tokens_source); equals chunk_gap when every chunk carries one token")},
    "chunk_gap": {"unit": "s", "definition": "gaps between consecutive token chunks of one streamed response"},
    "tokens_per_chunk": {"unit": "tokens", "definition": ("tokens / token chunks of successful streams, after each "
                                                          "stream's first chunk")},
    "multi_token_fraction": {"unit": "fraction",
                             "definition": "share of those chunks that carried more than one token"},
    "tpot": {"unit": "s",
             "definition": "(done - first_token) / (output_tokens - 1): time per output token after the first"},
    "send_lag": {"unit": "s", "definition": "sent - scheduled: how late the generator sent the request"},
    "error_rate": {"unit": "fraction",
                   "definition": "failed requests (any error class, dropped included) / all requests"},
    "aborted_rate": {"unit": "fraction",
                     "definition": ("requests the client aborted on purpose (workload.cancel; not an error, left "
                                    "out of every latency distribution) / all requests")},
    "goodput": {"unit": "fraction", "definition": ("good requests / requests judged: a request is good when it "
                                                   "succeeded and met every per-request bound of the scenario's "
                                                   "goodput: block that applies to it (latency, ttft, ttfat, "
                                                   "tpot, service_time); aborted requests are not judged; "
                                                   "absent (null) without a goodput: block")},
    "goodput_qps": {"unit": "1/s", "definition": ("good requests completed inside the window / duration "
                                                  "(DistServe's and vLLM's request goodput)")},
    "achieved_qps": {"unit": "1/s",
                     "definition": "successful responses completed inside the phase window / phase duration"},
    "sent_qps": {"unit": "1/s", "definition": "requests sent (not dropped) scheduled in the phase / phase duration"},
    "target_qps": {"unit": "1/s", "definition": "mean intended arrival rate of the phase"},
    "output_tokens_per_s": {"unit": "1/s", "definition": ("output tokens of successful requests completed "
                                                          "inside the window / duration")},
    "input_tokens_per_s": {"unit": "1/s", "definition": ("prompt tokens (prompt_tokens: the server's usage, else "
                                                         "latbench's count) of successful requests completed inside "
                                                         "the window / duration")},
    "output_tokens_per_s_per_user": {"unit": "1/s", "definition": (
        "per request, (output_tokens - 1) / (done - first_token): the decode speed one user sees (streamed requests "
        "with 2+ output tokens; 1 / tpot); a distribution, reported with p1/p5/p10 for the slowest users")},
    "prompt_tokens": {"unit": "tokens", "definition": (
        "the prompt's length: the server's usage.prompt_tokens when it sent one, else latbench's own count, "
        "input_tokens + added_tokens; prompt_tokens_source says which (usage | tokenizer | approximation)")},
    "input_tokens": {"unit": "tokens", "definition": (
        "the prompt as latbench built it, content only (no chat template, no special tokens), counted with "
        "workload.tokenizer, else approximated at 4 characters a token")},
    "added_tokens": {"unit": "tokens", "definition": (
        "what the server adds around the prompt as latbench's tokenizer counts it: the chat template's overhead "
        "(chat APIs) or the special tokens a plain prompt gets, such as BOS (completions); -1 when unknown")},
    "output_tokens": {"unit": "tokens", "definition": (
        "the answer's length; output_tokens_source says how it was counted: usage (the server's), tokenizer (the "
        "streamed text counted with workload.tokenizer), chunks (one token per content chunk: a lower bound when "
        "chunks carry several tokens)")},
    "usage_vs_counted": {"unit": "requests", "definition": (
        "where the server sent usage and latbench counted the prompt: how many of them agree exactly "
        "(usage.prompt_tokens == input_tokens + added_tokens), and the smallest and largest difference")},
    "closed_loop.held": {"unit": "requests", "definition": (
        "closed loop: the concurrency held, the time-average of requests in flight (sent -> done; for "
        "conversations, of sessions in progress: first turn sent -> last turn done, think times included) from "
        "the moment every user has sent its first request to the phase's end, beside the asked concurrency; "
        "below 95% of it the run is generator-limited")},
    "closed_loop.gap": {"unit": "s", "definition": (
        "closed loop: the client's own time from an answer (done) to its user's next request (sent; a "
        "conversation's later turn: from its due time), p50 and p99")},
    "latency_errors_inf": {"unit": "s",
                           "definition": "latency percentiles with every failed request counted as infinitely slow"},
}
