CREATE TABLE api_keys (
	id VARCHAR(40) NOT NULL, 
	name VARCHAR(200) NOT NULL, 
	key_hash VARCHAR(64) NOT NULL, 
	prefix VARCHAR(32) NOT NULL, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	expires_at TIMESTAMP WITH TIME ZONE, 
	revoked_at TIMESTAMP WITH TIME ZONE, 
	last_used_at TIMESTAMP WITH TIME ZONE, 
	models JSON, 
	scopes JSON NOT NULL, 
	default_thinking VARCHAR(8), 
	rpm INTEGER, 
	tpm INTEGER, 
	max_concurrency INTEGER, 
	priority INTEGER NOT NULL, 
	metadata JSON NOT NULL, 
	previous_hash VARCHAR(64), 
	previous_expires_at TIMESTAMP WITH TIME ZONE, 
	PRIMARY KEY (id), 
	UNIQUE (name)
);
CREATE INDEX ix_api_keys_previous_hash ON api_keys (previous_hash);
CREATE UNIQUE INDEX ix_api_keys_key_hash ON api_keys (key_hash);
CREATE TABLE audit_log (
	id SERIAL NOT NULL, 
	at TIMESTAMP WITH TIME ZONE NOT NULL, 
	actor VARCHAR(200) NOT NULL, 
	action VARCHAR(64) NOT NULL, 
	target VARCHAR(200), 
	client VARCHAR(100), 
	detail JSON NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_audit_log_at ON audit_log (at);
CREATE TABLE response_owners (
	response_id VARCHAR(128) NOT NULL, 
	key_id VARCHAR(40) NOT NULL, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	PRIMARY KEY (response_id)
);
CREATE INDEX ix_response_owners_key_id ON response_owners (key_id);
CREATE TABLE usage_ledger (
	id SERIAL NOT NULL, 
	request_id VARCHAR(128) NOT NULL, 
	key_id VARCHAR(40) NOT NULL, 
	key_name VARCHAR(200) NOT NULL, 
	model VARCHAR(200) NOT NULL, 
	route VARCHAR(64) NOT NULL, 
	stream BOOLEAN NOT NULL, 
	arrived_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	status INTEGER NOT NULL, 
	finish_reason VARCHAR(32), 
	client_disconnected BOOLEAN NOT NULL, 
	prompt_tokens INTEGER NOT NULL, 
	completion_tokens INTEGER NOT NULL, 
	cached_tokens INTEGER NOT NULL, 
	reasoning_tokens INTEGER NOT NULL, 
	queue_wait_s FLOAT, 
	ttft_s FLOAT, 
	upstream_ttft_s FLOAT, 
	decode_tokens_per_s FLOAT, 
	e2e_s FLOAT, 
	spec JSON, 
	spec_candidates JSON NOT NULL, 
	PRIMARY KEY (id)
);
CREATE INDEX ix_usage_ledger_key_id ON usage_ledger (key_id);
CREATE INDEX ix_usage_ledger_arrived_at ON usage_ledger (arrived_at);
CREATE INDEX ix_usage_ledger_request_id ON usage_ledger (request_id);
INSERT INTO api_keys (id, name, key_hash, prefix, created_at, expires_at, revoked_at, last_used_at, models, scopes, default_thinking, rpm, tpm, max_concurrency, priority, metadata, previous_hash, previous_expires_at) VALUES ('key_7d8343e66d92b97ba114e25c', 'team-active', '8f84d83cc48e09356a925f44562f937366b1ed1dd82eb114ff353778187a0557', 'dsk-b3r1…', '2026-01-05 09:00:00+00:00', NULL, NULL, '2026-02-01 12:30:00+00:00', '["deepseek-v4-flash-0731"]', '[]', 'high', 60, 100000, 2, 3, '{"team":"a","cost_center":17}', NULL, NULL);
INSERT INTO api_keys (id, name, key_hash, prefix, created_at, expires_at, revoked_at, last_used_at, models, scopes, default_thinking, rpm, tpm, max_concurrency, priority, metadata, previous_hash, previous_expires_at) VALUES ('key_2beab39fc903d384a8ca5736', 'team-rotated', '4db9f6e0eb8a99e1eb95970961ef7a05f74aa60263bc18c700233df2900e81ec', 'dsk-qOp9…', '2026-01-06 09:00:00+00:00', NULL, NULL, NULL, 'null', '[]', NULL, NULL, NULL, NULL, 1, '{}', '9a3cc5d932245e73af93346244c121e0c0f0f8dd484adeb21d59ff26126b880a', '2099-01-01 00:00:00+00:00');
INSERT INTO api_keys (id, name, key_hash, prefix, created_at, expires_at, revoked_at, last_used_at, models, scopes, default_thinking, rpm, tpm, max_concurrency, priority, metadata, previous_hash, previous_expires_at) VALUES ('key_6ddd3705e01d0eea4d08bf73', 'team-revoked', '9b83d3d59403e95c1c87ca68024eb7e7c183ada54265832e8a60096be02e1012', 'dsk-nNd6…', '2026-01-07 09:00:00+00:00', NULL, '2026-01-20 10:00:00+00:00', NULL, 'null', '[]', NULL, NULL, NULL, NULL, 1, '{}', NULL, NULL);
INSERT INTO api_keys (id, name, key_hash, prefix, created_at, expires_at, revoked_at, last_used_at, models, scopes, default_thinking, rpm, tpm, max_concurrency, priority, metadata, previous_hash, previous_expires_at) VALUES ('key_42e2715f536804a5afb5447c', 'team-expired', 'dfe23038775389bbc9d796e8e0d42899af491f4d92c12d4e81a3117c00000dc3', 'dsk-WLmn…', '2026-01-08 09:00:00+00:00', '2026-01-09 09:00:00+00:00', NULL, NULL, 'null', '[]', NULL, NULL, NULL, NULL, 1, '{}', NULL, NULL);
INSERT INTO api_keys (id, name, key_hash, prefix, created_at, expires_at, revoked_at, last_used_at, models, scopes, default_thinking, rpm, tpm, max_concurrency, priority, metadata, previous_hash, previous_expires_at) VALUES ('key_a92c36e66a25ee99ff862faa', 'ops', '78cb404602d099753a82c48815e292008565880c7ebda00fc1ec4a7b6e647623', 'dsk-TPFp…', '2026-01-01 08:00:00+00:00', NULL, NULL, NULL, 'null', '["admin"]', NULL, NULL, NULL, NULL, 1, '{}', NULL, NULL);
INSERT INTO audit_log (id, at, actor, action, target, client, detail) VALUES (1, '2026-01-07 09:00:00+00:00', 'ops', 'create', 'team-revoked', '127.0.0.1', '{"prefix":"dsk-nNd6…","actor_id":"key_a92c36e66a25ee99ff862faa","actor_kind":"key"}');
INSERT INTO audit_log (id, at, actor, action, target, client, detail) VALUES (2, '2026-01-20 10:00:00+00:00', 'ops', 'revoke', 'team-revoked', '127.0.0.1', '{"actor_id":"key_a92c36e66a25ee99ff862faa","actor_kind":"key"}');
INSERT INTO usage_ledger (id, request_id, key_id, key_name, model, route, stream, arrived_at, status, finish_reason, client_disconnected, prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, queue_wait_s, ttft_s, upstream_ttft_s, decode_tokens_per_s, e2e_s, spec, spec_candidates) VALUES (1, 'req-0.1.0-1', 'key_7d8343e66d92b97ba114e25c', 'team-active', 'deepseek-v4-flash-0731', 'chat', true, '2026-02-01 10:00:00+00:00', 200, 'stop', false, 100, 10, 1, 5, 0.01, 0.25, 0.24, 88.5, 1.5, '{"k":5,"source":"backend","accepted_per_step":2.9}', '[{"source":"backend","steps":10,"accepted":29}]');
INSERT INTO usage_ledger (id, request_id, key_id, key_name, model, route, stream, arrived_at, status, finish_reason, client_disconnected, prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, queue_wait_s, ttft_s, upstream_ttft_s, decode_tokens_per_s, e2e_s, spec, spec_candidates) VALUES (2, 'req-0.1.0-2', 'key_7d8343e66d92b97ba114e25c', 'team-active', 'deepseek-v4-flash-0731', 'responses', false, '2026-02-02 10:00:00+00:00', 200, 'stop', false, 200, 20, 2, 10, 0.01, 0.25, 0.24, 88.5, 1.5, 'null', '[]');
INSERT INTO usage_ledger (id, request_id, key_id, key_name, model, route, stream, arrived_at, status, finish_reason, client_disconnected, prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, queue_wait_s, ttft_s, upstream_ttft_s, decode_tokens_per_s, e2e_s, spec, spec_candidates) VALUES (3, 'req-0.1.0-3', 'key_2beab39fc903d384a8ca5736', 'team-rotated', 'deepseek-v4-flash-0731', 'messages', true, '2026-02-03 10:00:00+00:00', 499, NULL, true, 300, 30, 3, 15, 0.01, 0.25, 0.24, 88.5, 1.5, '{"k":5,"source":"backend","accepted_per_step":2.9}', '[{"source":"backend","steps":10,"accepted":29}]');
INSERT INTO response_owners (response_id, key_id, created_at) VALUES ('resp_0_1_0', 'key_7d8343e66d92b97ba114e25c', '2026-02-02 10:00:00+00:00');
SELECT setval('audit_log_id_seq', (SELECT max(id) FROM audit_log));
SELECT setval('usage_ledger_id_seq', (SELECT max(id) FROM usage_ledger));
