"""OpenAI's chat completions and text completions: the request models (:mod:`.models`), their
normalisation for vLLM (:mod:`.normalize`), the dialects (:mod:`.chat`, :mod:`.completions` over
:mod:`.dialect`), and the response rewriter (:mod:`.rewrite` over :mod:`.chunks` and
:mod:`.choice_writer`; what the client asked to see: :mod:`.client_view`)."""
