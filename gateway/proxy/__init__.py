"""The request pipeline, written once for every dialect: the request's owner (:mod:`.exchange`), the
response that runs it (:mod:`.respond`), the client side (:mod:`.reply`), the stream relay
(:mod:`.relay`, :mod:`.sse`), the upstream seam (:mod:`.upstream`) and its aiohttp client."""
