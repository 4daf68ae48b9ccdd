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
	rpm INTEGER, 
	tpm INTEGER, 
	max_concurrency INTEGER, 
	priority INTEGER NOT NULL, 
	metadata JSON NOT NULL, 
	previous_hash VARCHAR(64), 
	previous_expires_at DATETIME, 
	PRIMARY KEY (id), 
	UNIQUE (name)
);
INSERT INTO "api_keys" VALUES('key_1f2da91e1c1e4128b293f197','team-active','95a43ce02d4de6da1d97e375f2584e787748076ef3931c5768df228a3e35e039','dsk-0dmY…','2026-12-04 02:31:19.778554','2036-12-01 02:31:19.682904',NULL,'2026-12-04 02:31:28.483136','["deepseek-v4-flash-0731"]','[]','high',600,1000000,2,3,'{}',NULL,NULL);
INSERT INTO "api_keys" VALUES('key_452132f77af246059e3ce426','team-revoked','7d3cb1a7567e8993f85fddccd644086f26f600283c99dcd2dcc30fad839fa8eb','dsk-xZAR…','2026-12-04 02:31:20.697260',NULL,'2026-12-04 02:31:21.799784',NULL,'null','[]',NULL,NULL,NULL,NULL,1,'{}',NULL,NULL);
INSERT INTO "api_keys" VALUES('key_3c00b2e85e6f4dcaa7e64a85','team-expired','e525d6d513fab22c6d414aa98829d0d2af89c79ed6328fcc4dbfff695e781e9f','dsk-AVBt…','2026-12-04 02:31:23.026492','2026-12-04 02:31:23.949413',NULL,NULL,'null','[]',NULL,NULL,NULL,NULL,1,'{}',NULL,NULL);
INSERT INTO "api_keys" VALUES('key_4a92035b09e946b58a6edca4','ops','f818dce2df62ae1cf22d11cf83adcbbfe0162bc37aec56d51685a7d86d09521b','dsk-53O9…','2026-12-04 02:31:24.039147',NULL,NULL,'2026-12-04 02:31:28.888500','null','["admin"]',NULL,NULL,NULL,NULL,1,'{}',NULL,NULL);
INSERT INTO "api_keys" VALUES('key_45472a6e8f0046a99898e801','team-rotated','4e71d173353cfb9b09992641481f0bbd1410bb10323d48d27ee4225b91d103db','dsk-Mr12…','2026-12-04 02:31:24.940969',NULL,NULL,'2026-12-04 02:31:30.429530','null','[]',NULL,NULL,NULL,NULL,1,'{}','9d48a18d26f8bcf3f7cb17e9fafefbfe276de245a201222ca7d1418be58508ed','2036-12-01 02:31:25.857142');
INSERT INTO "api_keys" VALUES('key_c6d305528f71488a99d82644','team-api','b958ade76acdd1f96d52ae4b6a98077a32dd379ffa513671ba5529daf9daed77','dsk-QYsD…','2026-12-04 02:31:28.888754',NULL,NULL,'2026-12-04 02:31:30.435050','["deepseek-v4-flash-0731"]','[]',NULL,NULL,NULL,NULL,1,'{"team":"api","cost_center":17}',NULL,NULL);
INSERT INTO "api_keys" VALUES('key_989ffd51832e4caca1515843','team-api-revoked','acc648e8eb5e1431b52766ea6d3b632ea2e755f28a10d9af442a15209b7b8f72','dsk-Ch8m…','2026-12-04 02:31:28.899006',NULL,'2026-12-04 02:31:28.908428',NULL,'null','[]',NULL,NULL,NULL,NULL,1,'{}',NULL,NULL);
CREATE TABLE audit_log (
	id INTEGER NOT NULL, 
	at DATETIME NOT NULL, 
	actor VARCHAR(200) NOT NULL, 
	action VARCHAR(64) NOT NULL, 
	target VARCHAR(200), 
	client VARCHAR(100), 
	detail JSON NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO "audit_log" VALUES(1,'2026-12-04 02:31:28.894719','ops','key.create','key_c6d305528f71488a99d82644','127.0.0.1','{"name":"team-api","prefix":"dsk-QYsD…","models":["deepseek-v4-flash-0731"],"metadata":{"team":"api","cost_center":17}}');
INSERT INTO "audit_log" VALUES(2,'2026-12-04 02:31:28.901408','ops','key.create','key_989ffd51832e4caca1515843','127.0.0.1','{"name":"team-api-revoked","prefix":"dsk-Ch8m…"}');
INSERT INTO "audit_log" VALUES(3,'2026-12-04 02:31:28.910979','ops','key.revoke','key_989ffd51832e4caca1515843','127.0.0.1','{}');
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
INSERT INTO "usage_ledger" VALUES(1,'req-c47315f713eb46da99d46113e82e231b','key_1f2da91e1c1e4128b293f197','team-active','deepseek-v4-flash-0731','/v1/chat/completions',0,'2026-12-04 02:31:28.483184',200,'length',0,9,16,0,16,0.0,NULL,NULL,NULL,1.95146656999895640183e-01,'{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true}','[{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true}]');
INSERT INTO "usage_ledger" VALUES(2,'req-9df712b4661146238af62ac111686ba1','key_1f2da91e1c1e4128b293f197','team-active','deepseek-v4-flash-0731','/v1/chat/completions',1,'2026-12-04 02:31:28.679894',200,'length',0,9,16,0,16,0.0,2.4433275999854231486e-02,2.41214410000338830286e-02,8.49226806450903382028e+01,2.07542451999870536383e-01,'{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true}','[{"source":"metrics_delta","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75,"exact":true},{"source":"stream","steps":4,"accepted_tokens":11,"draft_tokens":20,"acceptance_rate":0.55,"mean_acceptance_length":3.75}]');
CREATE INDEX ix_api_keys_previous_hash ON api_keys (previous_hash);
CREATE UNIQUE INDEX ix_api_keys_key_hash ON api_keys (key_hash);
CREATE INDEX ix_usage_ledger_arrived_at ON usage_ledger (arrived_at);
CREATE INDEX ix_usage_ledger_key_id ON usage_ledger (key_id);
CREATE INDEX ix_usage_ledger_request_id ON usage_ledger (request_id);
CREATE INDEX ix_audit_log_at ON audit_log (at);
COMMIT;
