"""Transports: how requests reach the target (lean asyncio HTTP/1.1, aiohttp, httpx). ``factory`` picks one."""
