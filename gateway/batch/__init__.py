"""Batches: the OpenAI Batch API's runs in the slots interactive work leaves (:mod:`gateway.batch.runner`)."""
