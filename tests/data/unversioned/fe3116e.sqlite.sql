BEGIN TRANSACTION;
CREATE TABLE api_keys (
	id VARCHAR(40) NOT NULL, 
	name VARCHAR(200) NOT NULL, 
	key_hash VARCHAR(64) NOT NULL, 
	prefix VARCHAR(32) NOT NULL, 
	created_at DATETIME NOT NULL, 
	expires_at DATETIME, 
	revoked_at DATETIME, 
	last_used_at DATETIME, 
	models JSON, 
	scopes JSON NOT NULL, 
	default_thinking VARCHAR(8), 
	PRIMARY KEY (id), 
	UNIQUE (name)
);
INSERT INTO "api_keys" VALUES('key_e7cb75a41f8546f39ac13ba4','team-active','6355953af2b3c9f0b522f0463de5cc7cfa20304488b8ecd39c9910327256dd08','dsk-L2Tz…','2026-12-04 02:30:27.614584','2036-12-01 02:30:27.582377',NULL,'2026-12-04 02:30:33.081228','["deepseek-v4-flash-0731"]','[]','high');
INSERT INTO "api_keys" VALUES('key_c845ca67a0b34728aa52518b','team-revoked','7af01cf0ac50bd5734964cfeee4a747b14648fe8329c71c067de2ebd972ffe78','dsk-eYQ2…','2026-12-04 02:30:28.359146',NULL,'2026-12-04 02:30:29.141047',NULL,'null','[]',NULL);
INSERT INTO "api_keys" VALUES('key_ae2108c608724b908964742d','team-expired','286e5476182f8c5196e4fa50a783deed25c819315611c7b60ac43cd2d8e2f7e1','dsk-YHb2…','2026-12-04 02:30:29.882521','2026-12-04 02:30:30.863622',NULL,NULL,'null','[]',NULL);
INSERT INTO "api_keys" VALUES('key_2036e1f9bfd3457eb37bdd83','ops','19c9cacd4bdf8ae28a98a927f37748ae6ba19203a9c713564a4f809f35b49eb6','dsk-py-z…','2026-12-04 02:30:30.610349',NULL,NULL,'2026-12-04 02:30:35.003237','null','[]',NULL);
CREATE TABLE usage_ledger (
	id INTEGER NOT NULL, 
	request_id VARCHAR(128) NOT NULL, 
	key_id VARCHAR(40) NOT NULL, 
	key_name VARCHAR(200) NOT NULL, 
	model VARCHAR(200) NOT NULL, 
	route VARCHAR(64) NOT NULL, 
	stream BOOLEAN NOT NULL, 
	arrived_at DATETIME NOT NULL, 
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
INSERT INTO "usage_ledger" VALUES(1,'req-6809cffc27ce43bf8bd2305d908a30ba','key_e7cb75a41f8546f39ac13ba4','team-active','deepseek-v4-flash-0731','/v1/chat/completions',0,'2026-12-04 02:30:33.081446',200,'length',0,9,16,0,16,0.0,NULL,NULL,NULL,2.03127800999936880543e-01,'{"source": "metrics_delta", "steps": 4, "accepted_tokens": 11, "draft_tokens": 20, "acceptance_rate": 0.55, "mean_acceptance_length": 3.75, "exact": true}','[{"source": "metrics_delta", "steps": 4, "accepted_tokens": 11, "draft_tokens": 20, "acceptance_rate": 0.55, "mean_acceptance_length": 3.75, "exact": true}]');
INSERT INTO "usage_ledger" VALUES(2,'req-05261e7a992343228b5a21528421993f','key_e7cb75a41f8546f39ac13ba4','team-active','deepseek-v4-flash-0731','/v1/chat/completions',1,'2026-12-04 02:30:33.286887',200,'length',0,9,16,0,16,0.0,3.27656430001752596581e-02,3.26750080000692832982e-02,9.22499171781440736612e+01,2.02833053000176732894e-01,'{"source": "metrics_delta", "steps": 4, "accepted_tokens": 11, "draft_tokens": 20, "acceptance_rate": 0.55, "mean_acceptance_length": 3.75, "exact": true}','[{"source": "metrics_delta", "steps": 4, "accepted_tokens": 11, "draft_tokens": 20, "acceptance_rate": 0.55, "mean_acceptance_length": 3.75, "exact": true}, {"source": "stream", "steps": 4, "accepted_tokens": 11, "draft_tokens": 20, "acceptance_rate": 0.55, "mean_acceptance_length": 3.75}]');
CREATE UNIQUE INDEX ix_api_keys_key_hash ON api_keys (key_hash);
CREATE INDEX ix_usage_ledger_arrived_at ON usage_ledger (arrived_at);
CREATE INDEX ix_usage_ledger_key_id ON usage_ledger (key_id);
CREATE INDEX ix_usage_ledger_request_id ON usage_ledger (request_id);
COMMIT;
