"""The server's front ends: the HTTP application (OpenAI and KServe v2 routes, /health, /metrics, /tokenize),
KServe v2 over gRPC, and the parsing and formatting of their protocols. Each request enters the serving engine
(:mod:`reference_server.serving`) through :mod:`.generation`."""
